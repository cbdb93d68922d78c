import APNSCore
import PushCore
import PostgresStores
import PushStores
import Foundation
import Testing

/// A poll batch's two lookups in one statement (devices of both platforms and recorded
/// outcomes, `UNION ALL`) find what the two statements apart find, on the real PostgreSQL.
extension TokenRegistryTests {
    @Test func devicesAndRecordedDeliveriesInOneStatementFindWhatTheTwoLookupsFindApart() async throws {
        try await RegistryDatabase.withStore { store, _ in
            let package = topic + ".android"
            let phone = TestDevice.randomToken()
            let gone = TestDevice.randomToken()
            let android = "fcm:" + UUID().uuidString
            #expect(try await store.apply(register(phone, user: "u-1", environment: .sandbox, at: t(1))))
            #expect(try await store.apply(register(gone, user: "u-2", at: t(1))))
            #expect(try await store.markUnregistered(topic: topic, token: gone, at: t(2)))
            let fcm = TokenRegistryUpdate(
                action: .register, userID: "u-2", token: android, topic: package, environment: .production, timestamp: t(1),
                platform: .fcm, fcmTarget: .fid)
            #expect(try await store.apply(fcm))

            let today = LedgerEvent.day(ofMilliseconds: WallClock.millisecondsSince1970())
            let first = LedgerEvent(eventID: "e-1", topic: topic, day: today)
            let second = LedgerEvent(eventID: "e-2", topic: topic, day: today - 1)
            let elsewhere = LedgerEvent(eventID: "e-1", topic: topic + ".other", day: today)
            func outcome(_ event: LedgerEvent, _ token: String, _ platform: DevicePlatform) -> RecordedDelivery {
                RecordedDelivery(
                    event: event, target: LedgerTarget(device: token, platform: platform), userID: "u-1",
                    outcome: .send(
                        RecordedDelivery.SendOutcome(
                            status: .delivered, environment: .sandbox, apnsStatus: platform == .apns ? 200 : nil, reason: nil, attempts: 1,
                            latencyMilliseconds: 7, completedAtMilliseconds: WallClock.millisecondsSince1970(),
                            apnsUniqueID: platform == .apns ? UUID().uuidString.lowercased() : nil, platform: platform,
                            fcmStatus: platform == .fcm ? 200 : nil, fcmMessageID: platform == .fcm ? "projects/p/messages/1" : nil)))
            }
            let recorded = [outcome(first, phone, .apns), outcome(second, android, .fcm), outcome(elsewhere, phone, .apns)]
            _ = try await store.record(recorded.map { ($0, nil) })

            let together = try await store.activeDevicesAndRecordedDeliveries(
                apnsTopic: topic, fcmPackage: package, userIDs: ["u-1", "u-2", "u-3"], events: [first, second], ledger: store)
            #expect(together.devices["u-1"] == [DeviceToken(userID: "u-1", token: phone, environment: .sandbox)])
            #expect(together.devices["u-2"] == [DeviceToken(userID: "u-2", token: android, environment: .production, platform: .fcm, fcmTarget: .fid)])
            #expect(together.devices.count == 2, "no unregistered device, no user without devices")
            #expect(together.recorded == [first: [recorded[0].target: recorded[0]], second: [recorded[1].target: recorded[1]]])

            #expect(try await together.devices == store.activeDevices(apnsTopic: topic, fcmPackage: package, userIDs: ["u-1", "u-2", "u-3"]))
            #expect(try await together.recorded == store.recordedDeliveries(of: [first, second]))

            // Only devices, or only outcomes.
            let devicesOnly = try await store.activeDevicesAndRecordedDeliveries(
                apnsTopic: topic, fcmPackage: nil, userIDs: ["u-1"], events: [LedgerEvent(eventID: "none", topic: topic, day: today)], ledger: store)
            #expect(devicesOnly.devices["u-1"]?.map(\.token) == [phone] && devicesOnly.recorded.isEmpty)
            let outcomesOnly = try await store.activeDevicesAndRecordedDeliveries(
                apnsTopic: topic, fcmPackage: package, userIDs: [], events: [second], ledger: store)
            #expect(outcomesOnly.devices.isEmpty && outcomesOnly.recorded == [second: [recorded[1].target: recorded[1]]])

            // A ledger on another pool of the same database is asked apart, with the same answer.
            try await RegistryDatabase.withStore(migrate: false) { otherLedger, _ in
                let viaOther = try await store.activeDevicesAndRecordedDeliveries(
                    apnsTopic: topic, fcmPackage: package, userIDs: ["u-1", "u-2", "u-3"], events: [first, second], ledger: otherLedger)
                #expect(viaOther.devices == together.devices && viaOther.recorded == together.recorded)
            }
        }
    }
}
