import APNSCore
import PostgresStores
import PushStores
import Foundation
import Testing

/// The delivery ledger's key on the real PostgreSQL (HERALD_POSTGRES_URL): a row is typed by the
/// kind of target it is for, never by how its token looks, so targets whose stored bytes would
/// spell each other's stand apart.
@Suite(.timeLimit(.minutes(2)))
struct LedgerKeyTests {
    let topic = "com.example.ledger-key.\(UUID().uuidString.prefix(8).lowercased())"
    /// A record of 2026-11-26, 11:00 UTC.
    let recordedAt: Int64 = 1_795_690_800_000

    func outcome(_ token: String, _ platform: DevicePlatform, event: LedgerEvent, user: String) -> RecordedDelivery {
        RecordedDelivery(
            event: event,
            target: LedgerTarget(device: token, platform: platform),
            userID: user,
            outcome: .send(
                RecordedDelivery.SendOutcome(
                    status: .delivered,
                    environment: .production,
                    apnsStatus: platform == .apns ? 200 : nil,
                    reason: nil,
                    attempts: 1,
                    latencyMilliseconds: 7,
                    completedAtMilliseconds: recordedAt + 7,
                    platform: platform,
                    fcmStatus: platform == .fcm ? 200 : nil
                )
            )
        )
    }

    /// `6162636465666768` is the hex spelling of the bytes of `abcdefgh`: two Android devices of
    /// one user with these tokens, and an iPhone whose token is the first, get one event; each
    /// outcome is recorded, stands for itself and reads back as itself.
    @Test func targetsWhoseBytesSpellEachOtherStandApart() async throws {
        try await RegistryDatabase.withStore { store, _ in
            let event = LedgerEvent(eventID: "\(topic)-event", topic: topic, recordTimestampMilliseconds: recordedAt)
            let outcomes = [
                outcome("6162636465666768", .fcm, event: event, user: "u-1"),
                outcome("abcdefgh", .fcm, event: event, user: "u-1"),
                outcome("6162636465666768", .apns, event: event, user: "u-2"),
            ]
            let standing = try await store.record(outcomes.map { ($0, nil) })
            #expect(standing == outcomes)
            let recorded = try await store.recordedDeliveries(of: [event])
            #expect(recorded[event] == Dictionary(uniqueKeysWithValues: outcomes.map { ($0.target, $0) }))
            // Recorded again (a redelivery's copy): each earlier outcome stands for its own target.
            var again = outcomes
            for index in again.indices { again[index].userID = "someone-else" }
            #expect(try await store.record(again.map { ($0, nil) }) == outcomes)
        }
    }
}
