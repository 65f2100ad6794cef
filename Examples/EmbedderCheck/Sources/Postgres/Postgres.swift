/// A module of the embedder's own named `Postgres`, as a library of the ecosystem could be.
public enum PostgresModule {
    /// The module's name.
    public static let name = "Postgres"
}
