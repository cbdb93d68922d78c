import Foundation
import MockAPNS
import NIOCore
import NIOHPACK
import NIOHTTP2
import Testing

@Suite("MockAPNSServer fault injection", .timeLimit(.minutes(2)))
struct MockAPNSFaultTests {
    /// Sends `count` pushes one after another (so a seeded server draws in a known order) and
    /// returns the statuses in order.
    static func sequentialStatuses(
        _ faults: MockAPNSFaults,
        count: Int
    ) async throws -> (statuses: [Int], reasons: [String?], accepted: Int, counts: [Int: Int]) {
        try await withMockAPNSServer(MockAPNSConfiguration(faults: faults)) { server, port, caPath in
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")
            var statuses: [Int] = []
            var reasons: [String?] = []
            for index in 0..<count {
                let response = try await client.push(token: makeDeviceToken(UInt8(index % 256)), authorization: nil)
                statuses.append(response.status)
                reasons.append(response.reason)
            }
            return (statuses, reasons, server.totalAcceptedPushes, server.statusCounts())
        }
    }

    @Test("error fractions are drawn per request, never count as accepted, and a seed repeats them")
    func errorFractionsAreSeededAndNotAccepted() async throws {
        let faults = MockAPNSFaults(
            tooManyRequestsFraction: 0.2,
            internalServerErrorFraction: 0.1,
            serviceUnavailableFraction: 0.3,
            seed: 42
        )
        let first = try await Self.sequentialStatuses(faults, count: 400)
        let ok = first.statuses.filter { $0 == 200 }.count
        #expect(first.accepted == ok)
        #expect(first.counts[200] == ok)
        // Binomial(400, p): each count lies well within ±50 of its mean.
        #expect(abs((first.counts[429] ?? 0) - 80) < 50)
        #expect(abs((first.counts[500] ?? 0) - 40) < 50)
        #expect(abs((first.counts[503] ?? 0) - 120) < 50)
        #expect(abs(ok - 160) < 50)
        for (status, reason) in zip(first.statuses, first.reasons) {
            switch status {
            case 429: #expect(reason == "TooManyRequests")
            case 500: #expect(reason == "InternalServerError")
            case 503: #expect(reason == "ServiceUnavailable")
            default: #expect(status == 200)
            }
        }

        let again = try await Self.sequentialStatuses(faults, count: 400)
        #expect(again.statuses == first.statuses)
    }

    @Test("a fraction of 1 answers every request with that error")
    func fullFractionAnswersEveryRequest() async throws {
        let result = try await Self.sequentialStatuses(MockAPNSFaults(serviceUnavailableFraction: 1), count: 20)
        #expect(result.statuses == Array(repeating: 503, count: 20))
        #expect(result.accepted == 0)
    }

    @Test("fixed latency delays the answer; first-per-token delays only a token's first request")
    func latencyDelaysAnswers() async throws {
        let faults = MockAPNSFaults(latency: .init(fixed: .milliseconds(2500), scope: .firstRequestPerToken))
        try await withMockAPNSServer(MockAPNSConfiguration(faults: faults)) { server, port, caPath in
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")
            let token = makeDeviceToken(1)
            /// The status and how long the push took.
            func timedPush(_ token: String) async throws -> (status: Int, took: Duration) {
                let started = ContinuousClock.now
                let status = try await client.push(token: token, authorization: nil).status
                return (status, started.duration(to: .now))
            }

            let slow = try await timedPush(token)
            #expect(slow.status == 200)
            #expect(slow.took >= .milliseconds(2500))
            let fast = try await timedPush(token.uppercased())
            #expect(fast.status == 200)
            #expect(fast.took < .milliseconds(2500))
            let otherToken = try await timedPush(makeDeviceToken(2))
            #expect(otherToken.status == 200)
            #expect(otherToken.took >= .milliseconds(2500))
            #expect(server.totalAcceptedPushes == 3)
        }
    }

    @Test("a request reset by the client during the latency is never processed")
    func resetDuringLatencyIsNotProcessed() async throws {
        let faults = MockAPNSFaults(latency: .init(fixed: .seconds(30)))
        try await withMockAPNSServer(MockAPNSConfiguration(faults: faults)) { server, port, caPath in
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")
            let stream = try await client.multiplexer.createStreamChannel { stream in
                stream.eventLoop.makeSucceededVoidFuture()
            }.get()
            var headers = HPACKHeaders()
            headers.add(name: ":method", value: "POST")
            headers.add(name: ":scheme", value: "https")
            headers.add(name: ":authority", value: "localhost")
            headers.add(name: ":path", value: "/3/device/\(makeDeviceToken())")
            headers.add(name: "apns-topic", value: "com.example.app")
            stream.write(HTTP2Frame.FramePayload.headers(.init(headers: headers)), promise: nil)
            let body = ByteBuffer(string: #"{"aps":{"alert":"hi"}}"#)
            try await stream.writeAndFlush(HTTP2Frame.FramePayload.data(.init(data: .byteBuffer(body), endStream: true)))
                .get()

            // Wait until the server holds the request, then reset the stream (as at a deadline).
            try await waitUntil { server.streamStatistics().peakConcurrentStreamsBeforeFirstSuccess == 1 }
            // Closing an open stream sends RST_STREAM (CANCEL); the close itself reports that.
            try? await stream.close().get()
            try await waitUntil { server.streamStatistics().unansweredRequests == 1 }
            #expect(server.totalAcceptedPushes == 0)
            #expect(server.statusCounts().isEmpty)
        }
    }

    @Test("GOAWAY after N requests: streams up to the Nth are answered, later ones ignored, then close")
    func goAwayAfterRequests() async throws {
        let faults = MockAPNSFaults(goAwayAfterRequests: 3)
        try await withMockAPNSServer(MockAPNSConfiguration(faults: faults)) { server, port, caPath in
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")
            // One request first, so the connection (and its stream IDs) are established in order.
            #expect(try await client.push(token: makeDeviceToken(0), authorization: nil).status == 200)
            let outcomes = await withTaskGroup(of: Int?.self) { group in
                for index in 1...6 {
                    group.addTask {
                        try? await client.push(token: makeDeviceToken(UInt8(index)), authorization: nil).status
                    }
                }
                return await group.reduce(into: [Int?]()) { $0.append($1) }
            }
            // Requests 2 and 3 fit under the limit; the other four were above last-stream-id.
            #expect(outcomes.compactMap { $0 } == [200, 200])
            #expect(outcomes.filter { $0 == nil }.count == 4)
            try await client.channel.closeFuture.get()

            let goAways = client.connectionFrames.goAways
            #expect(goAways.count == 1)
            #expect(goAways.first?.lastStreamID == 5)
            #expect(goAways.first?.errorCode == .noError)
            #expect(goAways.first?.debugData == #"{"reason":"Shutdown"}"#)
            #expect(server.totalAcceptedPushes == 3)
            #expect(server.streamStatistics().goAwaysSent == 1)

            // A new connection starts a new count.
            let second = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")
            #expect(try await second.push(token: makeDeviceToken(9), authorization: nil).status == 200)
            #expect(server.totalAcceptedPushes == 4)
        }
    }

    @Test("one stream until the first success, then the configured limit in a new SETTINGS frame")
    func oneStreamUntilFirstSuccess() async throws {
        let configuration = MockAPNSConfiguration(
            maxConcurrentStreams: 50,
            faults: MockAPNSFaults(serviceUnavailableFraction: 0, oneStreamUntilFirstSuccess: true)
        )
        try await withMockAPNSServer(configuration) { server, port, caPath in
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")
            #expect(try await client.advertisedMaxConcurrentStreams.get() == 1)
            #expect(try await client.push(token: makeDeviceToken(), authorization: nil).status == 200)
            try await waitUntil { client.connectionFrames.advertisedMaxConcurrentStreams == [1, 50] }

            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<40 {
                    group.addTask { try await client.push(token: makeDeviceToken(UInt8(index)), authorization: nil).status }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.allSatisfy { $0 == 200 })
            let streams = server.streamStatistics()
            #expect(streams.peakConcurrentStreamsBeforeFirstSuccess == 1)
            #expect(streams.peakConcurrentStreamsAfterFirstSuccess > 1)
        }
    }
}

/// Polls `condition` every 10 ms for up to 10 s.
func waitUntil(_ condition: @Sendable () -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(10)
    while !condition() {
        guard ContinuousClock.now < deadline else {
            Issue.record("condition not met within 10 s")
            return
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}
