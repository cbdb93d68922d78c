import PushCore
import FCMCore
import FCMHTTP
import MockFCM
import Testing

/// The lanes' precedence on FCM's HTTP/2 streams, against the mock FCM: a request of the urgent
/// lane waits for a stream before every bulk one waiting, as on APNs' connections.
@Suite("FCM stream precedence against the mock FCM", .timeLimit(.minutes(2)))
struct StreamPrecedenceTests {
    /// Issue 48, finding 5: with 600 bulk requests queued for one connection's 100 streams, an
    /// urgent request takes the first stream freed, not the 601st.
    @Test func anUrgentRequestTakesAStreamBeforeEveryQueuedBulkOne() async throws {
        try await FCMHarness.run(configureClient: { $0.connections = 1 }) { harness in
            _ = try await harness.send(try FCMHarness.request("warm-up"))
            harness.server.setFaults(MockFCMFaults(latency: .milliseconds(100)))
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<600 {
                    group.addTask {
                        var request = try FCMHarness.request("bulk-\(index)")
                        request.precedence = .bulk
                        #expect(try await harness.send(request, timeout: .seconds(60)).decision == .delivered)
                    }
                }
                try await Task.sleep(for: .milliseconds(50))  // the bulk requests hold every stream, the rest queue
                let urgent = try await harness.send(try FCMHarness.request("urgent"), timeout: .seconds(60))
                let bulkBefore = harness.server.totalDelivered - 2  // the warm-up and the urgent one
                #expect(urgent.decision == .delivered)
                #expect(bulkBefore <= 300, "\(bulkBefore) bulk requests were answered before the urgent one")
                try await group.waitForAll()
            }
        }
    }
}
