/// A module of the embedder's own named `JOSE`, as a library of the ecosystem could be.
public enum JOSEModule {
    /// The module's name.
    public static let name = "JOSE"
}
