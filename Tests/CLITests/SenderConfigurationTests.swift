import Foundation
import TestSupport
import Testing

/// The sender's machine holds the sender's key and names the recipient by its team ID alone (team A never holds
/// team B's key): configuration.md's prescription, through the built binary.
@Suite("the sender's configuration: its own key and the recipient's team ID")
struct SenderConfigurationTests {
    @Test("transfer-ids and doctor run with the recipient's team ID alone; the exchange asks for the recipient's key by name")
    func recipientTeamOnly() async throws {
        try await SchemaWorld.run(.allauth, apple: 2) { world in
            let config = try world.configuration(recipientKey: false)
            let ids = try await runBatonOffPool(["transfer-ids", "--yes", "--rate", "100", "--config", config])
            #expect(ids.status == 0 && ids.stdout.contains("done 2,"), "\(ids.stdout)\(ids.stderr)")
            #expect(try world.count("SELECT count(*) FROM baton.transfers WHERE transfer_sub IS NOT NULL") == 2)
            let doctor = try await runBatonOffPool(["doctor", "--config", config])
            #expect(doctor.stdout.contains("ok    recipient key: none: team \(world.recipient.teamID) is named only"), "\(doctor.stdout)")
            #expect(doctor.stdout.contains("ok    sender key:"), "\(doctor.stdout)")
            let exchange = try await runBatonOffPool(["exchange", "--config", config])
            #expect(exchange.status == 2 && exchange.stderr.contains("apple.transfer.recipient.key_id"), "\(exchange.stdout)\(exchange.stderr)")
            #expect(try world.count("SELECT count(*) FROM baton.transfers WHERE state = 'migrated'") == 0)
        }
    }
}
