/// A module of the embedder's own named `JSON`, as a library of the ecosystem could be.
public enum JSONModule {
    /// The module's name.
    public static let name = "JSON"
}
