/// A module of the embedder's own named `HTTPServer`, as a library of the ecosystem could be.
public enum HTTPServerModule {
    /// The module's name.
    public static let name = "HTTPServer"
}
