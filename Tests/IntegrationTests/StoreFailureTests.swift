import APNSCore
import PushCore
import PushStores
import Foundation
import MockAPNS
import PostgresNIO
import PostgresStores
import Testing

/// A statement PostgreSQL refuses for good (here: the ledger table is gone, as after a botched
/// migration) is not a stall nobody sees: `herald run` reports `postgres_failing:42P01`, counts
/// it, keeps the message unacknowledged, and resumes by itself once the table is back.
@Suite(.timeLimit(.minutes(5)))
struct StoreFailureTests {
    @Test func aMissingTableMakesHeraldUnreadyNamingItAndAFixResumesWithoutARestart() async throws {
        let devices = TestDevice.twoPerUser(["u-1"])
        let testbed = try HeraldTestbed()
        try await testbed.withMocks {
            let (environment, httpPort) = try await testbed.heraldEnvironmentServingHTTP(group: "herald-\(UUID().uuidString)")
            let herald = try await testbed.startHerald(environment)
            try await testbed.register(devices)
            try await testbed.waitForActiveTokens(users: ["u-1"], count: devices.count)
            let ready = try await ReadinessTests.waitForReadiness(port: httpPort) { status, _ in status == 200 }
            #expect(ready.status == 200, "\(ready.body)")

            try await Self.sql("ALTER TABLE push.delivery_ledger RENAME TO delivery_ledger_hidden_by_test")
            do {
                try await testbed.publishEvent(id: "e-during-outage", users: ["u-1"])
                let failing = try await ReadinessTests.waitForReadiness(port: httpPort) { _, body in body.contains("postgres_failing:42P01") }
                #expect(failing.status == 503)
                #expect(failing.body.contains("postgres_failing:42P01"), "\(failing.body)")
                let metrics = try PrometheusText(try #require(httpGet(port: httpPort, path: "/metrics")?.body))
                #expect((metrics.value("herald_postgres_permanent_errors_total", ["sqlstate": "42P01"]) ?? 0) >= 1)
                #expect(testbed.production.pushCount(token: devices[0].token) == 0, "nothing is sent before the ledger answers")
            } catch {
                try await Self.sql("ALTER TABLE IF EXISTS push.delivery_ledger_hidden_by_test RENAME TO delivery_ledger")
                throw error
            }
            try await Self.sql("ALTER TABLE push.delivery_ledger_hidden_by_test RENAME TO delivery_ledger")

            let reader = try TopicReader(topics: [testbed.topics.results])
            let records = try await reader.read(timeout: .seconds(90)) { $0.count >= devices.count }
            #expect(records.compactMap(ResultRecord.init).map(\.status).sorted() == ["delivered", "delivered"])
            let again = try await ReadinessTests.waitForReadiness(port: httpPort) { status, _ in status == 200 }
            #expect(again.status == 200, "ready again without a restart: \(again.body)")
            let log = try String(contentsOfFile: testbed.directory.appendingPathComponent("herald.log").path, encoding: .utf8)
            #expect(log.components(separatedBy: "PostgreSQL refuses Herald's statements").count - 1 == 1, "logged once for the cause")
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }

    /// A statement PostgreSQL refused to prepare while the table was missing works again as soon
    /// as the table is back: postgres-nio keeps a refused preparation for the connection's life,
    /// so the store closes that connection rather than let the pool hand it out again.
    @Test func aStatementRefusedWhileTheTableWasMissingWorksOnceItIsBack() async throws {
        try await RegistryDatabase.withStore { store, _ in
            let event = LedgerEvent(
                eventID: "refused-\(UUID().uuidString)",
                topic: "com.example.refused",
                recordTimestampMilliseconds: WallClock.millisecondsSince1970()
            )
            try await Self.sql("ALTER TABLE push.delivery_ledger RENAME TO delivery_ledger_hidden_by_test")
            await #expect(throws: PSQLError.self) { _ = try await store.recordedDeliveries(of: [event]) }
            try await Self.sql("ALTER TABLE push.delivery_ledger_hidden_by_test RENAME TO delivery_ledger")
            let found = try await store.recordedDeliveries(of: [event])
            #expect(found.isEmpty, "the lookup runs again on a connection that prepares it anew")
        }
    }

    /// Runs one statement on the test database.
    static func sql(_ statement: String) async throws {
        try await RegistryDatabase.withStore(migrate: false) { _, client in
            _ = try await client.query(PostgresQuery(unsafeSQL: statement), logger: client.sqlLogger)
        }
    }
}
