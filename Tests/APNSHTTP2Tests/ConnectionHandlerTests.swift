import APNSCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import Testing

@testable import APNSHTTP2

/// Drives ``APNSConnectionHandler`` with HTTP/2 frames on a `NIOAsyncTestingChannel`: no sockets,
/// virtual time for deadlines and PINGs.
@Suite("Connection handler", .timeLimit(.minutes(1)))
struct ConnectionHandlerTests {
    final class Harness: Sendable {
        let loop: NIOAsyncTestingEventLoop
        let channel: NIOAsyncTestingChannel
        let handler: NIOLoopBound<APNSConnectionHandler>
        let ready: EventLoopFuture<Int>
        private let recordedEvents = NIOLockedValueBox<[APNSConnectionEvent]>([])
        private let requestIDs = NIOLockedValueBox<UInt64>(0)

        var events: [APNSConnectionEvent] { recordedEvents.withLockedValue { $0 } }

        init(pingInterval: TimeAmount = .seconds(60), pingTimeout: TimeAmount = .seconds(20)) async throws {
            let loop = NIOAsyncTestingEventLoop()
            let channel = NIOAsyncTestingChannel(loop: loop)
            let recordedEvents = self.recordedEvents
            let configuration = APNSConnectionHandler.Configuration(
                authority: "api.push.apple.com",
                handshakeTimeout: .seconds(10),
                pingInterval: pingInterval,
                pingTimeout: pingTimeout
            )
            (handler, ready) = try await loop.executeInContext {
                let ready = loop.makePromise(of: Int.self)
                let handler = APNSConnectionHandler(
                    configuration: configuration,
                    providerToken: "jwt-1",
                    readyPromise: ready,
                    logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }),
                    onEvent: { event in recordedEvents.withLockedValue { $0.append(event) } }
                )
                try channel.pipeline.syncOperations.addHandler(handler)
                return (NIOLoopBound(handler, eventLoop: loop), ready.futureResult)
            }
            self.loop = loop
            self.channel = channel
            try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443))
        }

        /// Sends the server's first SETTINGS frame and returns the stream limit the handler reports.
        func becomeReady(maxConcurrentStreams: Int? = 10) async throws -> Int {
            let settings =
                maxConcurrentStreams.map { [HTTP2Setting(parameter: .maxConcurrentStreams, value: $0)] } ?? []
            try await channel.writeInbound(HTTP2Frame(streamID: .rootStream, payload: .settings(.settings(settings))))
            return try await ready.get()
        }

        func start(
            _ request: APNSRequest = Harness.request(),
            deadlineIn: TimeAmount = .seconds(30)
        ) async -> Task<
            APNSStreamOutcome, any Error
        > {
            let handler = self.handler
            let loop = self.loop
            let requestID = requestIDs.withLockedValue {
                $0 += 1
                return $0
            }
            let deadline = loop.now + deadlineIn
            let task = Task {
                try await withCheckedThrowingContinuation { continuation in
                    loop.execute {
                        handler.value.startStream(
                            requestID: requestID,
                            request: request,
                            deadline: deadline,
                            continuation: continuation
                        )
                    }
                }
            }
            return task
        }

        /// Every frame written so far.
        func writtenFrames() async throws -> [HTTP2Frame] {
            await loop.run()
            var frames: [HTTP2Frame] = []
            while let frame = try await channel.readOutbound(as: HTTP2Frame.self) { frames.append(frame) }
            return frames
        }

        /// Waits until `count` frames were written and returns them.
        func waitForFrames(_ count: Int) async throws -> [HTTP2Frame] {
            var frames: [HTTP2Frame] = []
            while frames.count < count {
                frames.append(try await channel.waitForOutboundWrite(as: HTTP2Frame.self))
            }
            return frames
        }

        func respond(on streamID: HTTP2StreamID, status: Int, apnsID: String? = nil, body: String? = nil) async throws {
            var headers: HPACKHeaders = [":status": "\(status)"]
            if let apnsID { headers.add(name: "apns-id", value: apnsID) }
            try await channel.writeInbound(
                HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: body == nil)))
            )
            if let body {
                try await channel.writeInbound(
                    HTTP2Frame(
                        streamID: streamID,
                        payload: .data(.init(data: .byteBuffer(ByteBuffer(string: body)), endStream: true))
                    )
                )
            }
        }

        static func request(
            token: String = "a1b2c3",
            apnsID: String = "00000000-0000-4000-8000-000000000001"
        )
            -> APNSRequest
        {
            APNSRequest(
                deviceToken: token,
                topic: "com.example.shop",
                pushType: .alert,
                priority: .immediate,
                apnsID: apnsID,
                payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8)
            )
        }
    }

    private static func transportError(_ task: Task<APNSStreamOutcome, any Error>) async -> APNSTransportError? {
        do {
            _ = try await task.value
            return nil
        } catch let error as APNSTransportError {
            return error
        } catch {
            Issue.record("unexpected error \(error)")
            return nil
        }
    }

    @Test func becomesReadyWithTheServersStreamLimit() async throws {
        let harness = try await Harness()
        #expect(try await harness.becomeReady(maxConcurrentStreams: 7) == 7)
    }

    @Test func missingLimitMeansUnlimited() async throws {
        let harness = try await Harness()
        #expect(
            try await harness.becomeReady(maxConcurrentStreams: nil) == APNSConnectionHandler.streamLimitWhenUnlimited
        )
    }

    @Test func sendsHeadersAndBodyAndMatchesTheAnswer() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        let task = await harness.start()
        let frames = try await harness.waitForFrames(2)

        #expect(frames[0].streamID == 1)
        guard case .headers(let headers) = frames[0].payload else {
            Issue.record("expected HEADERS, got \(frames[0].payload)")
            return
        }
        #expect(!headers.endStream)
        #expect(headers.headers.first(name: ":path") == "/3/device/a1b2c3")
        #expect(headers.headers.first(name: "authorization") == "bearer jwt-1")
        #expect(headers.headers.first(name: ":authority") == "api.push.apple.com")
        guard case .data(let data) = frames[1].payload, case .byteBuffer(let body) = data.data else {
            Issue.record("expected DATA, got \(frames[1].payload)")
            return
        }
        #expect(data.endStream)
        #expect(String(buffer: body) == #"{"aps":{"alert":"hi"}}"#)

        try await harness.respond(on: 1, status: 200, apnsID: "00000000-0000-4000-8000-000000000001")
        let outcome = try await task.value
        #expect(outcome.response == APNSResponse(status: 200, apnsID: "00000000-0000-4000-8000-000000000001"))
        #expect(outcome.providerToken == "jwt-1")
    }

    @Test func streamIDsIncreaseAndTokensCanBeReplaced() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        let first = await harness.start()
        _ = try await harness.waitForFrames(2)
        let handler = harness.handler
        try await harness.loop.executeInContext { handler.value.installProviderToken("jwt-2") }
        let second = await harness.start()
        let frames = try await harness.waitForFrames(2)
        #expect(frames[0].streamID == 3)
        if case .headers(let headers) = frames[0].payload {
            #expect(headers.headers.first(name: "authorization") == "bearer jwt-2")
        }
        try await harness.respond(on: 3, status: 200)
        try await harness.respond(on: 1, status: 200)
        #expect(try await second.value.providerToken == "jwt-2")
        #expect(try await first.value.providerToken == "jwt-1")
    }

    @Test func errorAnswerCarriesReasonAndTimestamp() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        let task = await harness.start()
        _ = try await harness.waitForFrames(2)
        try await harness.respond(
            on: 1,
            status: 410,
            apnsID: "x",
            body: #"{"reason":"Unregistered","timestamp":1700000000123}"#
        )
        #expect(
            try await task.value.response
                == APNSResponse(
                    status: 410,
                    apnsID: "x",
                    reason: .unregistered,
                    timestampMilliseconds: 1_700_000_000_123
                )
        )
    }

    @Test func deadlineResetsTheStream() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        let slow = await harness.start(deadlineIn: .seconds(1))
        let patient = await harness.start(deadlineIn: .seconds(5))
        _ = try await harness.waitForFrames(4)
        await harness.loop.advanceTime(by: .milliseconds(1001))
        let error = await Self.transportError(slow)
        #expect(error?.isDeadlineExceeded == true)
        let frames = try await harness.writtenFrames()
        #expect(
            frames.contains { frame in
                if case .rstStream(.cancel) = frame.payload { return frame.streamID == 1 }
                return false
            }
        )
        // The other stream keeps its own deadline.
        try await harness.respond(on: 3, status: 200)
        #expect(try await patient.value.response.status == 200)
    }

    @Test func laterDeadlineFiresAfterTheEarlierOne() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        let first = await harness.start(deadlineIn: .seconds(1))
        let second = await harness.start(deadlineIn: .seconds(2))
        _ = try await harness.waitForFrames(4)
        try await harness.respond(on: 1, status: 200)
        #expect(try await first.value.response.status == 200)
        await harness.loop.advanceTime(by: .seconds(1))
        await harness.loop.advanceTime(by: .milliseconds(1001))
        #expect(await Self.transportError(second)?.isDeadlineExceeded == true)
    }

    @Test func goAwayFailsStreamsAboveTheLastIDAndDrains() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        let one = await harness.start()
        let three = await harness.start()
        let five = await harness.start()
        _ = try await harness.waitForFrames(6)

        try await harness.channel.writeInbound(
            HTTP2Frame(
                streamID: .rootStream,
                payload: .goAway(
                    lastStreamID: 3,
                    errorCode: .noError,
                    opaqueData: ByteBuffer(string: #"{"reason":"Shutdown"}"#)
                )
            )
        )
        let refused = await Self.transportError(five)
        #expect(refused?.description.hasPrefix("stream reset") == true)
        #expect(refused?.description.contains("Shutdown") == true)
        guard case .goingAway(_, let reason) = harness.events.first else {
            Issue.record("expected goingAway, got \(harness.events)")
            return
        }
        #expect(reason == "Shutdown")

        // No new streams on a draining connection; the client moves such a request elsewhere.
        let late = await harness.start()
        do {
            _ = try await late.value
            Issue.record("a draining connection must not open streams")
        } catch let error as APNSStreamNotOpened {
            #expect(error.transportError.description.hasPrefix("stream reset"))
        }

        // Streams at or below the last stream ID still complete, then the connection closes.
        try await harness.respond(on: 1, status: 200)
        #expect(try await one.value.response.status == 200)
        #expect(harness.channel.isActive)
        try await harness.respond(on: 3, status: 200)
        #expect(try await three.value.response.status == 200)
        try await harness.channel.closeFuture.get()
    }

    @Test func resetStreamAndClosedConnectionFailTheirCallers() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        let reset = await harness.start()
        let lost = await harness.start()
        _ = try await harness.waitForFrames(4)
        try await harness.channel.writeInbound(HTTP2Frame(streamID: 1, payload: .rstStream(.refusedStream)))
        #expect(await Self.transportError(reset)?.description.hasPrefix("stream reset") == true)

        try await harness.channel.close()
        #expect(await Self.transportError(lost)?.description.hasPrefix("connection failed") == true)
        #expect(harness.events.contains { if case .closed = $0 { true } else { false } })
    }

    @Test func settingsChangesAreReported() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady(maxConcurrentStreams: 1)
        try await harness.channel.writeInbound(
            HTTP2Frame(
                streamID: .rootStream,
                payload: .settings(.settings([HTTP2Setting(parameter: .maxConcurrentStreams, value: 500)]))
            )
        )
        guard case .streamLimitChanged(500) = harness.events.first else {
            Issue.record("expected streamLimitChanged(500), got \(harness.events)")
            return
        }
    }

    @Test func idleConnectionPingsAndClosesWithoutAck() async throws {
        let harness = try await Harness(pingInterval: .seconds(60), pingTimeout: .seconds(20))
        _ = try await harness.becomeReady()
        // Inbound traffic during the first interval: no PING yet.
        await harness.loop.advanceTime(by: .seconds(60))
        #expect(try await harness.writtenFrames().isEmpty)
        // A whole idle interval: PING.
        await harness.loop.advanceTime(by: .seconds(60))
        let frames = try await harness.writtenFrames()
        guard frames.count == 1, case .ping(let data, ack: false) = frames[0].payload else {
            Issue.record("expected one PING, got \(frames)")
            return
        }
        // Acknowledged: the connection stays.
        try await harness.channel.writeInbound(HTTP2Frame(streamID: .rootStream, payload: .ping(data, ack: true)))
        await harness.loop.advanceTime(by: .seconds(30))
        #expect(harness.channel.isActive)
        // Two idle intervals later a PING goes unanswered: closed after the timeout.
        await harness.loop.advanceTime(by: .seconds(90))
        await harness.loop.advanceTime(by: .seconds(21))
        #expect(!harness.channel.isActive)
    }

    @Test func usedConnectionWindowIsReturned() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        let channel = harness.channel
        // NIOHTTP2 reports the connection window after DATA frames; above half nothing is sent.
        try await harness.loop.executeInContext {
            channel.pipeline.fireUserInboundEventTriggered(
                NIOHTTP2WindowUpdatedEvent(streamID: .rootStream, inboundWindowSize: 40_000, outboundWindowSize: 65_535)
            )
        }
        #expect(try await harness.writtenFrames().isEmpty)
        try await harness.loop.executeInContext {
            channel.pipeline.fireUserInboundEventTriggered(
                NIOHTTP2WindowUpdatedEvent(streamID: .rootStream, inboundWindowSize: 30_000, outboundWindowSize: 65_535)
            )
            // Stream windows are left alone.
            channel.pipeline.fireUserInboundEventTriggered(
                NIOHTTP2WindowUpdatedEvent(streamID: 1, inboundWindowSize: 10, outboundWindowSize: 65_535)
            )
        }
        let frames = try await harness.writtenFrames()
        #expect(frames.count == 1)
        guard let frame = frames.first, case .windowUpdate(let increment) = frame.payload else {
            Issue.record("expected WINDOW_UPDATE, got \(frames)")
            return
        }
        #expect(frame.streamID == .rootStream)
        #expect(increment == 35_535)
    }

    @Test func cancellationResetsTheStream() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        let handler = harness.handler
        let task = await harness.start()
        _ = try await harness.waitForFrames(2)
        try await harness.loop.executeInContext { handler.value.cancelStream(requestID: 1) }
        await #expect(throws: CancellationError.self) { try await task.value }
        let frames = try await harness.writtenFrames()
        #expect(frames.contains { if case .rstStream = $0.payload { $0.streamID == 1 } else { false } })
    }

    @Test func gracefulCloseWaitsForInFlightStreams() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        let handler = harness.handler
        let task = await harness.start()
        _ = try await harness.waitForFrames(2)
        try await harness.loop.executeInContext { handler.value.closeGracefully(within: .seconds(5)) }
        #expect(harness.channel.isActive)
        try await harness.respond(on: 1, status: 200)
        #expect(try await task.value.response.status == 200)
        try await harness.channel.closeFuture.get()
    }

    @Test func gracefulCloseGivesUpAfterTheGracePeriod() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        let handler = harness.handler
        let task = await harness.start()
        _ = try await harness.waitForFrames(2)
        try await harness.loop.executeInContext { handler.value.closeGracefully(within: .seconds(5)) }
        await harness.loop.advanceTime(by: .seconds(5))
        #expect(await Self.transportError(task)?.description.hasPrefix("connection failed") == true)
        #expect(!harness.channel.isActive)
    }
}
