import Baton
import Foundation

extension MigrationReport {
    /// The report as JSON (the body of `GET /v1/report`): snake_case keys, sorted, ISO 8601 dates in UTC.
    public func renderJSON() -> String {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        // Every member is a string, number, boolean, date or array of them: encoding cannot fail.
        let data = (try? encoder.encode(self)) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self) + "\n"
    }

    /// Reads a report from the JSON ``renderJSON()`` writes.
    /// - Throws: `DecodingError` when `json` is not such a report.
    public init(json: Data) throws {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        decoder.dateDecodingStrategy = .iso8601
        self = try decoder.decode(MigrationReport.self, from: json)
    }
}
