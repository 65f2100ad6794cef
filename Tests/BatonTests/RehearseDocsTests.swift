import Baton
import Foundation
import TestSupport
import Testing

@Suite("Rehearsal problem kinds")
struct RehearseDocsTests {
    @Test("every problem kind a rehearsal can report has a row in docs/rehearse.md's table, and the table no other")
    func documented() throws {
        let text = try String(contentsOf: packageRoot.appendingPathComponent("docs/rehearse.md"), encoding: .utf8)
        let rows = Set(text.split(separator: "\n").compactMap { line -> String? in
            guard line.hasPrefix("| `"), let end = line.dropFirst(3).firstIndex(of: "`") else { return nil }
            return String(line[line.index(line.startIndex, offsetBy: 3)..<end])
        })
        #expect(rows == Set(LegacyProblemKind.allCases.map(\.rawValue)))
    }
}
