import HeraldService
import Logging
import PostgresNIO
import PostgresStores
import PushStores
import Testing

/// The pipeline's pool on the real PostgreSQL (HERALD_POSTGRES_URL), through a proxy whose
/// connections die silently while idle (a NAT mapping expired, a failover): the next statement
/// finds its connection dead within the liveness check's bound and runs on a fresh one, instead
/// of waiting for the store's time limit once per dead connection.
@Suite(.timeLimit(.minutes(1)))
struct DeadIdleConnectionTests {
    @Test func aStatementAfterTheIdleConnectionsDiedRunsOnAFreshOne() async throws {
        var url = try PostgresURL(TestEnvironment.postgresURL)
        let proxy = try await FreezableTCPProxy(toHost: url.host, port: url.port)
        url.host = "127.0.0.1"
        url.port = proxy.port
        let logger = Logger(label: "test.dead-idle")
        let client = PostgresClient(configuration: url.clientConfiguration(maximumConnections: 4, pipeline: true), backgroundLogger: logger)
        let store = PostgresStore(client: client, logger: logger, idleCheck: IdleConnectionCheck(after: .seconds(1), bound: .seconds(1)))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            try await store.migrate()
            // Every connection of the pool in use once, then idle.
            try await withThrowingTaskGroup(of: Void.self) { lookups in
                for _ in 0..<8 { lookups.addTask { _ = try await store.activeDevices(apnsTopic: "com.example.dead-idle", fcmPackage: nil, userIDs: ["u-1"]) } }
                try await lookups.waitForAll()
            }
            proxy.freeze()
            try await Task.sleep(for: .milliseconds(1_500))
            let started = ContinuousClock.now
            let finished = try await withThrowingTaskGroup(of: Duration?.self) { race in
                race.addTask {
                    _ = try? await store.activeDevices(apnsTopic: "com.example.dead-idle", fcmPackage: nil, userIDs: ["u-1"])
                    return ContinuousClock.now - started
                }
                race.addTask {
                    try await Task.sleep(for: .seconds(8))
                    proxy.closeFrozen()  // Ends a lookup still waiting on a dead connection.
                    return nil
                }
                let first = try await race.next()!
                race.cancelAll()
                proxy.closeFrozen()
                return first
            }
            #expect(finished != nil, "the lookup waited on a dead connection for 8 s")
            if let finished { #expect(finished < .seconds(3)) }
        }
        try await proxy.shutdown()
    }
}
