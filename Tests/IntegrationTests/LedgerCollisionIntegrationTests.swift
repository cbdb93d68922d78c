import Foundation
import KafkaMessages
import MockAPNS
import MockFCM
import Testing

/// Issue 48, finding 1, against the real `herald`, Tansu, PostgreSQL and the mocks: one user's
/// devices whose tokens spell each other's bytes. An FCM token of 32 letters, a second FCM token
/// that is the first's bytes in hex, and an iPhone whose APNs token is that same hex get one
/// event: each gets one result (on the code before migration 7 the second outcome could be
/// neither inserted nor read back, the ledger writer retried it forever and no result of any
/// lane was published again); a later event to another user is delivered; the same event
/// published again republishes the three results and sends nothing.
@Suite(.timeLimit(.minutes(5)))
struct LedgerCollisionIntegrationTests {
    @Test func devicesWhoseTokensSpellEachOthersBytesEachGetOneResult() async throws {
        let testbed = try HeraldTestbed()
        let letters = "abcdefghijklmnopqrstuvwxyzABCDEF"
        let hexOfLetters = letters.utf8.map { String(format: "%02x", $0) }.joined()
        let iPhone = TestDevice(user: "alice", token: hexOfLetters, environment: "production")
        let bobPhone = TestDevice(user: "bob", token: TestDevice.randomToken(), environment: "production")
        try await testbed.withMocks {
            let (environment, httpPort) = try await testbed.heraldEnvironmentServingHTTP(group: "herald-\(UUID().uuidString)")
            let herald = try await testbed.startHerald(environment)
            _ = try await ReadinessTests.waitForReadiness(port: httpPort) { status, _ in status == 200 }
            try await testbed.register([iPhone, bobPhone])
            for token in [letters, hexOfLetters] {
                try await testbed.registerAndroid(user: "alice", token: token, at: "2026-11-21T10:00:00Z")
            }
            try await testbed.waitForActiveDevices(users: ["alice", "bob"], count: 4)

            let reader = try TopicReader(topics: [testbed.topics.results])
            func results(_ records: [KafkaMessage], of event: String) -> [KafkaMessage] {
                records.filter { ResultRecord($0)?.eventID == event }
            }
            try await testbed.publishMixedEvent(id: "collide-1", users: ["alice"])
            try await testbed.publishEvent(id: "after-1", users: ["bob"])
            var records = try await reader.read(timeout: .seconds(60)) { records in
                results(records, of: "collide-1").count >= 3 && !results(records, of: "after-1").isEmpty
            }
            let first = results(records, of: "collide-1").compactMap(\.json)
            #expect(first.count == 3, "\(first)")
            #expect(first.allSatisfy { $0["status"] as? String == "delivered" })
            let platforms = first.map { "\($0["platform"] as? String ?? "-") \($0["token"] as? String ?? "-")" }
            #expect(Set(platforms) == ["fcm \(letters)", "fcm \(hexOfLetters)", "apns \(hexOfLetters)"])
            #expect(results(records, of: "after-1").compactMap(ResultRecord.init).map(\.status) == ["delivered"], "the ledger writer moved on")
            #expect(testbed.fcm.deliveredCount(token: letters) == 1 && testbed.fcm.deliveredCount(token: hexOfLetters) == 1)
            #expect(testbed.pushCounts(iPhone).right == 1)

            // The same event again (a producer's duplicate): the recorded results, nothing sent.
            try await testbed.publishMixedEvent(id: "collide-1", users: ["alice"])
            let firstCopies = Set(results(records, of: "collide-1").compactMap(\.value))
            records = try await reader.read(timeout: .seconds(60)) { records in results(records, of: "collide-1").count >= 3 }
            let again = results(records, of: "collide-1")
            #expect(again.count == 3)
            #expect(Set(again.compactMap(\.value)) == firstCopies, "republished byte for byte")
            #expect(testbed.fcm.deliveredCount(token: letters) == 1 && testbed.fcm.deliveredCount(token: hexOfLetters) == 1)
            #expect(testbed.pushCounts(iPhone).right == 1)
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }
}
