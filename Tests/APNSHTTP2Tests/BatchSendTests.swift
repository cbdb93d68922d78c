import APNSCore
import Foundation
import MockAPNS
import Synchronization
import Testing

@testable import APNSHTTP2

/// ``APNSHTTP2Client/sendAll(_:environment:deadline:answered:)`` over real TLS to the mock: one
/// answer per request, whichever path a request took.
@Suite("APNSHTTP2Client batches", .timeLimit(.minutes(2)))
struct BatchSendTests {
    typealias Answers = [Int: [Result<APNSResponse, any Error>]]

    /// Sends `requests` as one batch and returns every answer by index.
    static func sendAll(_ requests: [APNSRequest], through client: APNSHTTP2Client, deadline: ContinuousClock.Instant) async -> Answers {
        let answers = Mutex<Answers>([:])
        await client.sendAll(requests, environment: .production, deadline: deadline) { index, answer in
            answers.withLock { $0[index, default: []].append(answer) }
        }
        return answers.withLock { $0 }
    }

    @Test func aBatchLargerThanTheFreeStreamsIsAnsweredOncePerRequest() async throws {
        try await MockAPNSIntegrationTests.withMockAndClient(maxConcurrentStreams: 10, connectionsPerEndpoint: 2) { fixture in
            // The first 200 lifts token authentication's one-stream start.
            let warmUp = try await fixture.client.send(MockAPNSIntegrationTests.request(), environment: .production, deadline: .now + .seconds(10))
            #expect(warmUp.status == 200)
            let requests = (0..<500).map { MockAPNSIntegrationTests.request(token: String(format: "%016x", $0)) }
            let answers = await Self.sendAll(requests, through: fixture.client, deadline: .now + .seconds(60))

            #expect(answers.keys.sorted() == Array(requests.indices))
            #expect(answers.values.allSatisfy { $0.count == 1 }, "one answer per request")
            for (index, request) in requests.enumerated() {
                let response = try #require(try answers[index]?.first?.get())
                #expect(response.status == 200)
                #expect(response.apnsID == request.apnsID)
            }
            #expect(fixture.server.totalAcceptedPushes == 501)
            #expect(fixture.server.repeatedAPNSIDCount == 0)
            #expect(fixture.client.poolSnapshot(.production).peakStreamsPerConnection == 10)
        }
    }

    @Test func anExpiredProviderTokenInABatchIsReplacedAndSentAgainOnce() async throws {
        let now = Int64(Date().timeIntervalSince1970)
        let expired = try MockAPNSIntegrationTests.credentials.signToken(issuedAt: now - 2 * 3600)
        let fresh = try MockAPNSIntegrationTests.credentials.signToken(issuedAt: now)
        let source = MockAPNSIntegrationTests.ScriptedTokenSource(tokens: [expired, fresh])
        try await MockAPNSIntegrationTests.withMockAndClient(connectionsPerEndpoint: 1, makeTokenSource: { source }) { fixture in
            let answers = await Self.sendAll([MockAPNSIntegrationTests.request()], through: fixture.client, deadline: .now + .seconds(10))
            #expect(answers[0]?.count == 1)
            #expect((try? answers[0]?.first?.get())?.status == 200)
            #expect(await source.replacements == 1)
            #expect(fixture.server.statusCounts() == [403: 1, 200: 1])
        }
    }

    /// A batch whose task is cancelled answers every request with the cancellation at once:
    /// cancelled before it starts, it sends nothing; cancelled while its streams wait for the
    /// mock's 2 s, it resets them.
    @Test(arguments: [true, false])
    func aCancelledBatchAnswersEachRequestAtOnce(cancelledBeforeItStarts: Bool) async throws {
        let faults = MockAPNSFaults(latency: .init(fixed: .seconds(2), scope: .firstRequestPerToken))
        try await MockHarness.run(mock: SenderAgainstMockTests.tokenMock(faults: faults), authentication: SenderAgainstMockTests.tokenAuthentication) {
            harness in
            // The warm-up's own 2 s, so the batch gets every stream it asks for.
            let warmUp = try await harness.client.send(MockHarness.request(10_000), environment: .production, deadline: .now + .seconds(30))
            #expect(warmUp.status == 200)
            let requests = (0..<5).map { MockHarness.request($0) }
            let client = harness.client
            let started = ContinuousClock.now
            let answers = await withTaskGroup(of: Answers.self) { group in
                if cancelledBeforeItStarts { group.cancelAll() }
                group.addTask { await Self.sendAll(requests, through: client, deadline: .now + .seconds(30)) }
                if !cancelledBeforeItStarts {
                    try? await Task.sleep(for: .milliseconds(200))
                    group.cancelAll()
                }
                return await group.next()!
            }
            #expect(started.duration(to: .now) < .seconds(1), "answered at the cancellation, not after the mock's 2 s")
            #expect(answers.keys.sorted() == Array(requests.indices))
            for answer in answers.values {
                #expect(answer.count == 1)
                #expect(throws: CancellationError.self) { try answer.first?.get() }
            }
            let server = harness.server
            if cancelledBeforeItStarts {
                #expect(server.streamStatistics().unansweredRequests == 0, "nothing sent")
            } else {
                try await waitUntil { server.streamStatistics().unansweredRequests == 5 }
            }
        }
    }
}
