import Baton
import BatonPostgres
import Logging

/// What the ```swift blocks of README.md and docs/*.md take as given: the application around Baton.
///
/// Tests/EmbedderTests compiles each block as the body of an async throwing method of this protocol, in a package
/// that depends on Baton's library products as an embedder's does (`Logging` is Examples/EmbedderCheck's stand-in for
/// swift-log). Only the application's own things belong here; everything Baton provides comes from Baton.
protocol SnippetContext {
    /// The loaded configuration.
    var configuration: BatonConfiguration { get }
    /// An engine, for blocks that do not start one.
    var engine: BatonEngine { get }
    /// A pool, for blocks that call the store.
    var pool: PostgresPool { get }
    /// The application's swift-log logger.
    var app: Logging.Logger { get }
    /// The identity token the app or Apple's form_post delivered.
    var idToken: String { get }
    /// The nonce the app hashed into its authorization request.
    var rawNonce: String { get }
    /// The application's login session.
    var session: any LoginSession { get }
    /// A sending team's identifier, the receiving team's, the new email and the transfer identifier of one user.
    var old: String { get }
    var new: String { get }
    var email: String { get }
    var transferSub: String { get }
    /// Creates the application's account for a new Apple user.
    func createAccount(appleSub: String)
    /// Offers the re-link page to a transferred user Baton could not resolve.
    func offerRelink()
    /// Refuses the login, saying why.
    func reject(reason: String)
    /// Asks the client to try again later.
    func retryLater()
}

/// The application's login session.
protocol LoginSession {
    /// Signs in the user whose record has `userKey`.
    func open(userKey: String)
}
