import FCMCore
import PushCore
import FCMHTTP
import Foundation
import MockFCM
import Testing

/// ``FCMHTTPClient``'s own HTTP/2 transport against the mock FCM: GOAWAY, deadlines, the stream
/// limit, the answer size cap, connection failures and shutdown.
@Suite("FCM transport against the mock FCM", .timeLimit(.minutes(3)))
struct TransportAgainstMockTests {
    /// Streams above a GOAWAY's last stream ID are sent again on a new connection by the client
    /// itself: every request is answered on its first `send`, and delivered exactly once.
    @Test func goAwaySendsUnprocessedStreamsAgainWithoutTheCallerRetrying() async throws {
        try await FCMHarness.run(configure: { $0.faults = MockFCMFaults(goAwayAfterRequests: 15) }) { harness in
            _ = try await harness.send(try FCMHarness.request("warm-up"))
            try await withThrowingTaskGroup(of: FCMResponse.self) { group in
                for index in 0..<40 { group.addTask { try await harness.send(try FCMHarness.request("device-\(index)")) } }
                for try await response in group { #expect(response.decision == .delivered) }
            }
            for index in 0..<40 { #expect(harness.server.requestCount(token: "device-\(index)") == 1) }
            #expect(harness.server.totalDelivered == 41)
        }
    }

    /// A request past its deadline fails `deadlineExceeded` and its stream is reset: the mock,
    /// which processes a message only when its stream is still open after the latency, never
    /// sees it, and the connection goes on serving.
    @Test func aRequestPastItsDeadlineIsResetAndTheConnectionServesOn() async throws {
        try await FCMHarness.run { harness in
            _ = try await harness.send(try FCMHarness.request("warm-up"))
            harness.server.setFaults(MockFCMFaults(latency: FCMHarness.slowAnswer))
            let started = ContinuousClock.now
            await #expect {
                _ = try await harness.send(try FCMHarness.request("slow"), timeout: .milliseconds(200))
            } throws: { error in
                (error as? TransportError)?.isDeadlineExceeded == true
            }
            #expect(started.duration(to: .now) < FCMHarness.endedAtTheDeadlineWithin)
            try await Task.sleep(for: FCMHarness.slowAnswer + .milliseconds(200))
            #expect(harness.server.requestCount(token: "slow") == 0)
            harness.server.setFaults(.none)
            #expect(try await harness.send(try FCMHarness.request("after")).decision == .delivered)
        }
    }

    /// More requests than the mock's 100 streams: the rest wait for a stream, none fails.
    @Test func requestsBeyondTheStreamLimitWaitForAStream() async throws {
        try await FCMHarness.run { harness in
            harness.server.setFaults(MockFCMFaults(latency: .milliseconds(50)))
            try await withThrowingTaskGroup(of: FCMResponse.self) { group in
                for index in 0..<250 { group.addTask { try await harness.send(try FCMHarness.request("device-\(index)")) } }
                for try await response in group { #expect(response.decision == .delivered) }
            }
            #expect(harness.server.totalDelivered == 250)
        }
    }

    /// An answer longer than ``FCMClientConfiguration/maximumResponseBytes`` is read as none.
    /// The cap, which the token exchange shares, lets the mock's token answer (about 85 bytes)
    /// through but not its UNREGISTERED error (about 190).
    @Test func anAnswerBeyondTheSizeCapIsReadAsNoBody() async throws {
        try await FCMHarness.run(configureClient: { $0.maximumResponseBytes = 120 }) { harness in
            harness.server.markUnregistered(token: "gone")
            let response = try await harness.send(try FCMHarness.request("gone"))
            #expect(response.status == 404)
            #expect(response.error == nil)
            #expect(response.decision == .rejected)
        }
    }

    /// Nothing listens at FCM's address: the request fails as a connection failure, long before its deadline.
    @Test func anUnreachableFCMIsAConnectionFailure() async throws {
        try await FCMHarness.run(configureClient: { $0.baseURL = "https://127.0.0.1:1" }) { harness in
            let started = ContinuousClock.now
            await #expect {
                _ = try await harness.send(try FCMHarness.request("device"))
            } throws: { error in
                (error as? TransportError)?.isConnectionFailure == true
            }
            #expect(started.duration(to: .now) < .seconds(8), "its deadline is 10 s")
        }
    }

    /// Once ``FCMHTTPClient/run()`` has ended, a request fails `shuttingDown`.
    @Test func aRequestAfterShutdownFailsShuttingDown() async throws {
        try await FCMHarness.run { harness in
            let client = try FCMHTTPClient(
                configuration: FCMClientConfiguration(
                    baseURL: "https://127.0.0.1:\(harness.port)",
                    credentials: FCMCredentials(fallback: harness.account),
                    additionalTrustRootsPEMPath: harness.caPath
                ),
                logger: FCMHarness.logger
            )
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await client.run() }
                #expect(try await client.send(try FCMHarness.request("before"), deadline: .now + .seconds(10)).decision == .delivered)
                group.cancelAll()
                try await group.waitForAll()
            }
            await #expect {
                _ = try await client.send(try FCMHarness.request("after"), deadline: .now + .seconds(10))
            } throws: { error in
                (error as? TransportError)?.isShuttingDown == true
            }
        }
    }
}
