import APNSCore
import Foundation
import MockAPNS
import MockServerSupport
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

    /// A request to send again (here after a 403 ExpiredProviderToken) starts as soon as its
    /// first answer is known: it does not wait for the batch's slowest stream (one device the
    /// mock answers after 4 s), so it neither inherits that stream's lateness nor runs out of
    /// deadline behind it.
    @Test func aRetryInABatchDoesNotWaitForTheBatchsSlowestStream() async throws {
        // A provider token that expires 30 s from now by the mock's clock (APNs allows an hour),
        // however slowly the mock and the client start, and its successor; the test then moves the
        // mock's clock past the first one's hour.
        let clockAhead = Atomic<Int64>(0)
        let now = MockWallClock.millisecondsSince1970() / 1000
        let expiring = try MockAPNSIntegrationTests.credentials.signToken(issuedAt: now - 3600 + 30)
        let fresh = try MockAPNSIntegrationTests.credentials.signToken(issuedAt: now)
        let source = MockAPNSIntegrationTests.ScriptedTokenSource(tokens: [expiring, fresh])
        try await MockAPNSIntegrationTests.withMockAndClient(
            connectionsPerEndpoint: 1,
            makeTokenSource: { source },
            wallClockMilliseconds: { MockWallClock.millisecondsSince1970() + clockAhead.load(ordering: .relaxed) }
        ) { fixture in
            // The first 200 lifts token authentication's one-stream start, so the batch gets its streams.
            let warmUp = try await fixture.client.send(MockAPNSIntegrationTests.request(), environment: .production, deadline: .now + .seconds(10))
            #expect(warmUp.status == 200)
            clockAhead.store(31_000, ordering: .relaxed)
            let slowToken = "00000000000000aa"
            fixture.server.setFaults(MockAPNSFaults(latency: .init(fixed: .seconds(4), scope: .tokens([slowToken]))))
            let tokens = [slowToken] + (1...3).map { String(format: "%016x", $0) }
            let requests = tokens.map { MockAPNSIntegrationTests.request(token: $0) }
            let answers = Mutex<[Int: Duration]>([:])
            let started = ContinuousClock.now
            await fixture.client.sendAll(requests, environment: .production, deadline: .now + .seconds(20)) { index, answer in
                if (try? answer.get())?.status == 200 { answers.withLock { $0[index] = started.duration(to: .now) } }
            }
            let answeredAfter = answers.withLock { $0 }
            for index in requests.indices.dropFirst() {
                let after = try #require(answeredAfter[index], "request \(index) was not delivered")
                // Before the slow stream's first answer could have come, however slow the run.
                #expect(after < .seconds(3), "request \(index) waited for the slow stream")
            }
            #expect(await source.replacements == 1)
            let slow = try #require(answeredAfter[0], "the slow request was not delivered")
            #expect(slow >= .seconds(8), "its 403 after 4 s, then its second try's 4 s")
            #expect(fixture.server.statusCounts() == [200: 1 + tokens.count, 403: tokens.count])
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
