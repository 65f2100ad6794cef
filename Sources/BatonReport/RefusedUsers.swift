import Baton
import Foundation
import BatonPostgres

/// The users refused for good at one bulk step (its `unresolvable` rows), so that the commands running or checking
/// the step keep naming them after the run that refused them: how many, the first few by legacy key (never an
/// email), the most frequent reason, what it means and the way out.
public struct RefusedUsers: Sendable, Equatable {
    /// The step that refused them.
    public var step: MigrationReport.Step
    /// How many.
    public var count: Int
    /// The first few in row order: the legacy key, or `identifier <old_sub>` when no legacy row carries the user.
    public var sample: [String]
    /// The most frequent `last_error` among them.
    public var reason: String?

    /// Reads the users refused at `step`: an index scan of the refused rows (0012's index leads with the state).
    /// - Parameters:
    ///   - legacy: the application's table, for the keys.
    ///   - sample: users named at most; default 5.
    /// - Throws: `PostgresError`.
    public static func read(pool: PostgresPool, step: MigrationReport.Step, legacy l: BatonConfiguration.LegacyIdentifiers, sample: Int = 5) async throws -> RefusedUsers {
        let refused: PostgresQuery = step == .transferIdentifiers
            ? "t.state = 'unresolvable' AND t.transfer_sub IS NULL" : "t.state = 'unresolvable' AND t.transfer_sub IS NOT NULL"
        let summary = try await pool.query("""
            SELECT count(*), mode() WITHIN GROUP (ORDER BY t.last_error) FROM baton.transfers AS t WHERE
            """ + " " + refused)[0]
        let count = try summary.decode(Int.self, at: 0)
        guard count > 0 else { return RefusedUsers(step: step, count: 0, sample: [], reason: nil) }
        // The Apple row carrying the old identifier, else the key an import recorded (between companies).
        let key: PostgresQuery = "COALESCE((SELECT u.\(l.keyColumn)::text FROM \(l.table) AS u WHERE " + l.subjectEqualsSQL(l.storedSubjectSQL(expression: "t.old_sub")) + l.filterSQL() + " LIMIT 1), t.legacy_key)"
        let rows = try await pool.query("SELECT " + key + ", COALESCE(t.old_sub, t.transfer_sub) FROM baton.transfers AS t WHERE " + refused
                                        + " ORDER BY t.id LIMIT \(max(0, sample))")
        let named = try rows.map { row in try row.decode(String?.self, at: 0) ?? "identifier " + row.decode(String.self, at: 1) }
        return RefusedUsers(step: step, count: count, sample: named, reason: try summary.decode(String?.self, at: 1))
    }

    /// `2 users, for good (unresolvable; last error invalid_request): legacy keys 1, 2, …`.
    public var summary: String {
        let more = count > sample.count ? ", …" : ""
        return "\(count) users, for good (unresolvable; last error \(reason ?? "none recorded")): legacy keys \(sample.joined(separator: ", "))\(more)"
    }

    /// What the refusal means and the way out, on one line.
    public var advice: String {
        let means: String
        switch (step, reason) {
        case (.transferIdentifiers, "invalid_request"):
            means = "Apple's invalid_request: the user revoked the app, or is not the sending team's user of it, so no transfer identifier can be made and the recipient can neither exchange them nor match their sign-ins"
        case (.exchange, "invalid_request"):
            means = "Apple's invalid_request: the transfer identifier is unknown or was made for another team, or the user revoked the app"
        case (.exchange, let reason?) where reason.hasSuffix("a duplicate, for baton merge"):
            means = "the user made a second account under the new identifier: baton merge carries it over"
        default:
            means = "the reason is in docs/troubleshooting.md"
        }
        let retry = "If a shared cause was fixed since (a wrong target team or client ID), rerun baton \(step.rawValue) --retry-unresolvable"
        let otherwise = step == .exchange
            ? "otherwise a sign-in within the window still migrates a user who comes back, and POST /v1/link (a token of each team) or an email reaches the others"
            : "otherwise only POST /v1/link (a token of each team) or an email to the user brings them back"
        return "\(means). \(retry); \(otherwise) (docs/troubleshooting.md, \"Refused users\")."
    }
}
