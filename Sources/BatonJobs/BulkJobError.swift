import Baton
import BatonErrors

/// The one error type of Baton's bulk jobs (`baton import transfers`, `baton transfer-ids`, `baton exchange`):
/// a stable code and a reason, one line for the operator, that holds no identifier, token or secret.
public typealias BulkJobError = CodedError<BulkJobErrorCode>

/// What went wrong in a bulk job.
public enum BulkJobErrorCode: String, ErrorCode, CaseIterable {
    /// The import file cannot be opened or read.
    case unreadableFile = "unreadable_file"
    /// The import file's first line is not `old_sub,transfer_sub` or `key,transfer_sub`.
    case missingHeader = "missing_header"
    /// `--columns` names something that is not a column, or a column that holds identifiers or emails.
    case invalidColumn = "invalid_column"
    /// An export would have carried a team-scoped identifier or a private relay address.
    case identifierInExport = "identifier_in_export"
    /// The 60-day window after the transfer's acceptance has closed: Apple no longer answers.
    case windowClosed = "window_closed"
    /// The transfer is not accepted yet (no `apple.transfer.accepted_at`), so nothing can be exchanged.
    case notAccepted = "not_accepted"
    /// The sender job's target is the sending team itself.
    case targetIsSender = "target_is_sender"
    /// The configuration lacks something the job needs (named in the message).
    case configuration
    /// The job stopped: credentials refused, too many consecutive failures, or the database failing.
    case stopped
    /// The job stopped because Apple answered no one for longer than its outage limit (`--max-outage`).
    case appleUnreachable = "apple_unreachable"
}
