import Baton
import Foundation

/// What `baton rehearse` found; its JSON form is a contract (`docs/rehearse.md`).
struct RehearsalResult: Sendable, Equatable, Encodable {
    /// The exchange's duration at the given rate and processes.
    struct Projection: Sendable, Equatable, Encodable {
        /// Exchange requests per second per process.
        var ratePerSecond: Double
        /// Exchange processes.
        var processes: Int
        /// Days the exchange of `by_exchange` users takes.
        var days: Double

        enum CodingKeys: String, CodingKey {
            case ratePerSecond = "rate_per_s", processes, days
        }
    }

    /// One problem, as the JSON lists it.
    struct Problem: Sendable, Equatable, Encodable {
        /// `email_conflict`, `subject_null`, …
        var kind: String
        /// Rows concerned.
        var count: Int
        /// Up to five keys.
        var examples: [String]
    }

    /// Rows `legacy.where` selects.
    var selected: Int
    /// Users migrated by a sign-in in the rehearsal.
    var bySignIn: Int
    /// Users migrated by the exchange in the rehearsal.
    var byExchange: Int
    /// Every problem met, in kind order.
    var problems: [Problem]
    /// The exchange's projection.
    var projection: Projection
    /// The report's table, for the text output only.
    var reportTable: String = ""
    /// Seconds the rehearsal took, for the text output only.
    var seconds: Double = 0
    /// Devices whose sign-in did not end in `migrated` (or `current`, for a second device), by what stopped
    /// them, for the text output only (a user no device migrated was exchanged instead).
    var failedDevices: [String: Int] = [:]

    enum CodingKeys: String, CodingKey {
        case selected, bySignIn = "by_signin", byExchange = "by_exchange", problems, projection
    }

    /// The days the exchange of `users` takes at `rate` per process and `processes` processes.
    static func projection(users: Int, rate: Double, processes: Int) -> Projection {
        let days = Double(users) / (rate * Double(processes)) / 86_400
        return Projection(ratePerSecond: rate, processes: processes, days: (days * 1_000).rounded() / 1_000)
    }

    /// The JSON contract, keys sorted.
    func json() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(self) + Data("\n".utf8)
    }

    /// What a rehearsal cannot predict, printed after every summary: the emulator knows every subject of the copy and
    /// answers every call at once, and the copy is the data of one moment.
    static let limits = """
        What a rehearsal cannot predict (the emulator knows every subject of the copy and answers every call at once):
          - subjects Apple no longer knows (accounts deleted, Sign in with Apple revoked): Apple gives them no transfer
            identifier or no new identifier, and they stay unresolved; only the real run tells how many
          - Apple's real rate limits, errors and outages: the projection assumes --rate for the whole exchange
          - users who sign in with a second account during the cutover (a sign-in that reaches the application without
            Baton), and users who sign up after the copy was made
          - how many users sign in during the 60 days: --signin-share is an assumption

        """

    /// The lines printed to standard output.
    func renderText() -> String {
        var text = "\nThe transfer rehearsed on the copy, against the Apple emulator:\n\n" + reportTable
        text += "\n\nRehearsal (\(String(format: "%.1f", seconds)) s)\n"
        text += "  selected by the configuration: \(selected)\n"
        text += "  migrated in the rehearsal by sign-in: \(bySignIn), by exchange: \(byExchange)\n"
        if !failedDevices.isEmpty {
            let reasons = failedDevices.sorted { $0.value > $1.value || ($0.value == $1.value && $0.key < $1.key) }.map { "\($0.key): \($0.value)" }
            text += "  devices whose sign-in failed: \(failedDevices.values.reduce(0, +)) (\(reasons.joined(separator: ", "))); a user no device migrated was exchanged\n"
        }
        let p = projection
        let verdict = p.days <= 60 ? "within" : "BEYOND"
        text += "  exchange of \(byExchange) users at \(p.ratePerSecond)/s × \(p.processes) process(es): \(p.days) days, \(verdict) the 60-day window\n"
        if problems.isEmpty {
            text += "  no problem found in the copy\n"
        } else {
            text += "  problems:\n"
            for problem in problems {
                text += "    \(problem.kind): \(problem.count) (e.g. \(problem.examples.joined(separator: ", ")))\n"
            }
        }
        return text + "\n" + Self.limits
    }
}
