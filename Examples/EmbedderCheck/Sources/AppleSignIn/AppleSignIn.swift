/// A module of the embedder's own named `AppleSignIn`, as a library of the ecosystem could be.
public enum AppleSignInModule {
    /// The module's name.
    public static let name = "AppleSignIn"
}
