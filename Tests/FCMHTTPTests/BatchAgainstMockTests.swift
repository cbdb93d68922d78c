import FCMCore
import PushCore
import FCMHTTP
import Foundation
import MockFCM
import Synchronization
import Testing

/// ``FCMHTTPClient/sendAll(_:deadline:answered:)`` against the mock FCM: a batch's streams start
/// together and are answered by callback, with the single path's guarantees (one answer per
/// message, the stream limit, a refused access token refreshed once, GOAWAY, cancellation and
/// deadlines). Each test warms the client up first, so the batch finds a connection and a token.
@Suite("FCM batches against the mock FCM", .timeLimit(.minutes(3)))
struct BatchAgainstMockTests {
    @Test func everyMessageOfABatchIsAnsweredOnce() async throws {
        try await FCMHarness.run { harness in
            _ = try await harness.send(try FCMHarness.request("warm-up"))
            harness.server.markUnregistered(token: "device-5")
            let answers = await harness.sendAll(try (0..<60).map { try FCMHarness.request("device-\($0)") })
            #expect(answers.map(\.count) == Array(repeating: 1, count: 60))
            for (index, answer) in answers.enumerated() {
                let decision = try answer[0].get().decision
                #expect(decision == (index == 5 ? .unregistered : .delivered))
                #expect(harness.server.requestCount(token: "device-\(index)") == 1)
            }
            #expect(harness.server.totalDelivered == 60)
        }
    }

    /// 250 messages, 100 streams: what finds no free stream waits for one on the single path.
    @Test func aBatchLargerThanTheFreeStreamsIsDeliveredWhole() async throws {
        try await FCMHarness.run { harness in
            _ = try await harness.send(try FCMHarness.request("warm-up"))
            harness.server.setFaults(MockFCMFaults(latency: .milliseconds(50)))
            let answers = await harness.sendAll(try (0..<250).map { try FCMHarness.request("device-\($0)") })
            #expect(answers.map(\.count) == Array(repeating: 1, count: 250))
            #expect(try answers.allSatisfy { try $0[0].get().decision == .delivered })
            #expect(harness.server.totalDelivered == 251)
        }
    }

    /// The access token expires inside a batch: every message it refused is sent once more
    /// with one new token, and each is delivered once.
    @Test func anAccessTokenThatExpiresInsideABatchIsRefreshedOnce() async throws {
        try await FCMHarness.run { harness in
            _ = try await harness.send(try FCMHarness.request("warm-up"))
            harness.server.script(token: "device-0", [.expiredAccessToken])
            let answers = await harness.sendAll(try (0..<30).map { try FCMHarness.request("device-\($0)") })
            #expect(answers.map(\.count) == Array(repeating: 1, count: 30))
            let first = try answers[0][0].get()
            #expect(first.decision == .delivered)
            #expect(first.accessTokenRefreshed)
            #expect(harness.server.requestCount(token: "device-0") == 2)
            for index in 0..<30 {
                #expect(try answers[index][0].get().decision == .delivered)
                #expect(harness.server.deliveredCount(token: "device-\(index)") == 1)
                #expect(harness.server.requestCount(token: "device-\(index)") <= 2)
            }
            #expect(harness.server.tokenExchangeCount == 2)
            #expect(harness.server.statusCounts()[401, default: 0] >= 1)
        }
    }

    /// A second 401 after the refresh is final: the message is sent twice, not more.
    @Test func aMessageRefusedAgainAfterTheRefreshIsNotSentAThirdTime() async throws {
        try await FCMHarness.run { harness in
            _ = try await harness.send(try FCMHarness.request("warm-up"))
            harness.server.script(token: "device-0", [.expiredAccessToken, .expiredAccessToken])
            let answers = await harness.sendAll([try FCMHarness.request("device-0"), try FCMHarness.request("device-1")])
            let refused = try answers[0][0].get()
            #expect(refused.status == 401)
            #expect(refused.accessTokenRefreshed)
            #expect(refused.decision == .rejected)
            #expect(harness.server.requestCount(token: "device-0") == 2)
        }
    }

    /// GOAWAY while batches are in flight: streams the server did not take go again on a new
    /// connection, and every message is answered once and delivered once.
    @Test func goAwayInsideABatchLosesNothingAndRepeatsNothing() async throws {
        try await FCMHarness.run(configure: { $0.faults = MockFCMFaults(goAwayAfterRequests: 15) }) { harness in
            _ = try await harness.send(try FCMHarness.request("warm-up"))
            for batch in 0..<4 {
                let answers = await harness.sendAll(try (0..<30).map { try FCMHarness.request("device-\(batch)-\($0)") })
                #expect(answers.map(\.count) == Array(repeating: 1, count: 30))
                #expect(try answers.allSatisfy { try $0[0].get().decision == .delivered })
            }
            for batch in 0..<4 {
                for index in 0..<30 { #expect(harness.server.deliveredCount(token: "device-\(batch)-\(index)") == 1) }
            }
            #expect(harness.server.totalDelivered == 121)
        }
    }

    /// Cancelling the caller resets the batch's streams: each message is answered with a
    /// `CancellationError` at once, the mock never processes one, and the connection serves on.
    @Test func cancellingABatchResetsItsStreams() async throws {
        try await FCMHarness.run { harness in
            _ = try await harness.send(try FCMHarness.request("warm-up"))
            harness.server.setFaults(MockFCMFaults(latency: FCMHarness.slowAnswer))
            let requests = try (0..<20).map { try FCMHarness.request("device-\($0)") }
            let started = ContinuousClock.now
            let answers = await withTaskGroup(of: [[Result<FCMResponse, any Error>]].self) { group in
                group.addTask { await harness.sendAll(requests) }
                try? await Task.sleep(for: .milliseconds(100))
                group.cancelAll()
                return await group.next() ?? []
            }
            #expect(started.duration(to: .now) < FCMHarness.endedAtTheDeadlineWithin)
            #expect(answers.map(\.count) == Array(repeating: 1, count: 20))
            for answer in answers {
                #expect(throws: CancellationError.self) { try answer[0].get() }
            }
            try await harness.expectNeverProcessedAndServingOn((0..<20).map { "device-\($0)" })
        }
    }

    /// Past the deadline each message fails `deadlineExceeded` and its stream is reset.
    @Test func aBatchPastItsDeadlineIsResetAndTheConnectionServesOn() async throws {
        try await FCMHarness.run { harness in
            _ = try await harness.send(try FCMHarness.request("warm-up"))
            harness.server.setFaults(MockFCMFaults(latency: FCMHarness.slowAnswer))
            let started = ContinuousClock.now
            let answers = await harness.sendAll(try (0..<20).map { try FCMHarness.request("device-\($0)") }, timeout: .milliseconds(200))
            #expect(started.duration(to: .now) < FCMHarness.endedAtTheDeadlineWithin)
            #expect(answers.map(\.count) == Array(repeating: 1, count: 20))
            for answer in answers {
                #expect { try answer[0].get() } throws: { ($0 as? TransportError)?.isDeadlineExceeded == true }
            }
            try await harness.expectNeverProcessedAndServingOn((0..<20).map { "device-\($0)" })
        }
    }
}

extension FCMHarness {
    /// After a batch's streams were reset: the mock, past its latency, has processed no message
    /// to `tokens`, and with the faults cleared the connection serves on.
    func expectNeverProcessedAndServingOn(_ tokens: [String]) async throws {
        try await Task.sleep(for: FCMHarness.slowAnswer + .milliseconds(200))
        for token in tokens { #expect(server.requestCount(token: token) == 0) }
        server.setFaults(.none)
        #expect(try await send(try FCMHarness.request("after")).decision == .delivered)
    }

    /// Sends `requests` as one batch with a deadline `timeout` from now; returns every answer
    /// each request got, by index.
    func sendAll(_ requests: [FCMRequest], timeout: Duration = .seconds(10)) async -> [[Result<FCMResponse, any Error>]] {
        let answers = Mutex<[[Result<FCMResponse, any Error>]]>(Array(repeating: [], count: requests.count))
        await client.sendAll(requests, deadline: .now + timeout) { index, answer in
            answers.withLock { $0[index].append(answer) }
        }
        return answers.withLock { $0 }
    }
}
