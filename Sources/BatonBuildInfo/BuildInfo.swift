/// What `baton` is: its version and the commit it was built from, for `baton --version` and `/metrics`.
public enum BuildInfo {
    /// The release version.
    public static let version = "0.1.0"

    /// The full hash of the commit the build was made from, `-dirty` appended when tracked or untracked files
    /// differed from it; `unknown` when built outside a git work tree. Recorded at build time by the
    /// `BuildCommitPlugin` (scripts/build-commit.sh), never stored in the repository.
    public static let commit = buildCommit
}
