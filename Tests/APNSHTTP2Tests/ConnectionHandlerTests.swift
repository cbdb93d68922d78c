import APNSCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOHPACK
import Testing

@testable import APNSHTTP2

/// Drives ``APNSConnectionHandler`` with HTTP/2 bytes on a `NIOAsyncTestingChannel`: no sockets,
/// virtual time for deadlines and PINGs. Inbound frames are framed here and their headers
/// HPACK-encoded with Huffman coding; what the handler writes is cut into frames and decoded.
@Suite("Connection handler", .timeLimit(.minutes(1)))
struct ConnectionHandlerTests {
    /// A frame the handler wrote, decoded. SETTINGS frames are kept apart (``Harness/settingsWritten``).
    enum Written: CustomStringConvertible {
        case headers(streamID: UInt32, HPACKHeaders, endStream: Bool, block: ByteBuffer)
        case data(streamID: UInt32, String, endStream: Bool)
        case rstStream(streamID: UInt32, code: HTTP2Wire.ErrorCode)
        case ping(UInt64, ack: Bool)
        case windowUpdate(streamID: UInt32, increment: Int)
        case goAway(lastStreamID: UInt32, code: HTTP2Wire.ErrorCode)

        var streamID: UInt32 {
            switch self {
            case .headers(let id, _, _, _), .data(let id, _, _), .rstStream(let id, _), .windowUpdate(let id, _): id
            case .ping, .goAway: 0
            }
        }

        var description: String {
            switch self {
            case .headers(let id, let headers, let end, _): "HEADERS(\(id), \(headers), end: \(end))"
            case .data(let id, let body, let end): "DATA(\(id), \(body), end: \(end))"
            case .rstStream(let id, let code): "RST_STREAM(\(id), \(code))"
            case .ping(let data, let ack): "PING(\(data), ack: \(ack))"
            case .windowUpdate(let id, let increment): "WINDOW_UPDATE(\(id), \(increment))"
            case .goAway(let last, let code): "GOAWAY(\(last), \(code))"
            }
        }
    }

    /// The client's side of the byte stream, decoded as it arrives.
    struct OutboundDecoder {
        var prefaceSeen = false
        var reader = HTTP2Wire.FrameReader()
        var hpack = HPACKDecoder(allocator: ByteBufferAllocator())
        var frames: [Written] = []
        /// Each SETTINGS frame the handler wrote: nil for an acknowledgement, else its parameters.
        var settings: [[UInt16: UInt32]?] = []

        mutating func consume(_ bytes: ByteBuffer) throws {
            var bytes = bytes
            if !prefaceSeen {
                #expect(bytes.readBytes(length: HTTP2Wire.clientPreface.count) == HTTP2Wire.clientPreface)
                prefaceSeen = true
            }
            reader.append(bytes)
            while var frame = try reader.nextFrame() {
                switch frame.type {
                case .headers:
                    let block = frame.payload
                    let headers = try hpack.decodeHeaders(from: &frame.payload)
                    #expect(frame.flags.contains(.endHeaders))
                    frames.append(.headers(streamID: frame.streamID, headers, endStream: frame.flags.contains(.endStream), block: block))
                case .data:
                    frames.append(.data(streamID: frame.streamID, String(buffer: frame.payload), endStream: frame.flags.contains(.endStream)))
                case .rstStream:
                    frames.append(.rstStream(streamID: frame.streamID, code: .init(rawValue: frame.payload.readInteger()!)))
                case .ping:
                    frames.append(.ping(frame.payload.readInteger()!, ack: frame.flags.contains(.ack)))
                case .windowUpdate:
                    frames.append(.windowUpdate(streamID: frame.streamID, increment: Int(frame.payload.readInteger(as: UInt32.self)!)))
                case .goAway:
                    let last: UInt32 = frame.payload.readInteger()!
                    frames.append(.goAway(lastStreamID: last, code: .init(rawValue: frame.payload.readInteger()!)))
                case .settings:
                    if frame.flags.contains(.ack) {
                        settings.append(nil)
                    } else {
                        var parameters: [UInt16: UInt32] = [:]
                        while let id = frame.payload.readInteger(as: UInt16.self) { parameters[id] = frame.payload.readInteger() }
                        settings.append(parameters)
                    }
                default:
                    Issue.record("unexpected frame type \(frame.type.rawValue)")
                }
            }
        }
    }

    final class Harness: Sendable {
        let loop: NIOAsyncTestingEventLoop
        let channel: NIOAsyncTestingChannel
        let handler: NIOLoopBound<APNSConnectionHandler>
        let ready: EventLoopFuture<Int>
        private let recordedEvents = NIOLockedValueBox<[APNSConnectionEvent]>([])
        private let requestIDs = NIOLockedValueBox<UInt64>(0)
        private let outbound = NIOLockedValueBox(OutboundDecoder())
        private let responseEncoder = NIOLockedValueBox(HPACKEncoder(allocator: ByteBufferAllocator()))

        var events: [APNSConnectionEvent] { recordedEvents.withLockedValue { $0 } }
        var settingsWritten: [[UInt16: UInt32]?] { outbound.withLockedValue { $0.settings } }

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
        func becomeReady(maxConcurrentStreams: Int? = 10, initialWindowSize: Int? = nil) async throws -> Int {
            var settings: [(UInt16, Int)] = []
            if let maxConcurrentStreams { settings.append((HTTP2Wire.Setting.maxConcurrentStreams, maxConcurrentStreams)) }
            if let initialWindowSize { settings.append((HTTP2Wire.Setting.initialWindowSize, initialWindowSize)) }
            try await sendSettings(settings)
            return try await ready.get()
        }

        func sendSettings(_ settings: [(UInt16, Int)]) async throws {
            var payload = ByteBuffer()
            for (identifier, value) in settings {
                payload.writeInteger(identifier)
                payload.writeInteger(UInt32(value))
            }
            try await send(.settings, payload: payload)
        }

        /// Writes one inbound frame.
        func send(
            _ type: HTTP2Wire.FrameType,
            flags: HTTP2Wire.Flags = [],
            streamID: UInt32 = 0,
            payload: ByteBuffer = ByteBuffer()
        ) async throws {
            var bytes = ByteBuffer()
            bytes.writeHTTP2FrameHeader(length: payload.readableBytes, type: type, flags: flags, streamID: streamID)
            bytes.writeImmutableBuffer(payload)
            try await channel.writeInbound(bytes)
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
            // Returns only once the handler has the request, so requests started one after the
            // other get stream IDs in that order (1, 3, 5…): without this, two tasks raced to the
            // loop, and a test that reset "the first" stream waited for good on the other one.
            let started = loop.makePromise(of: Void.self)
            let task = Task {
                try await withCheckedThrowingContinuation { continuation in
                    loop.execute {
                        handler.value.startStream(
                            requestID: requestID,
                            request: request,
                            deadline: deadline,
                            continuation: continuation
                        )
                        started.succeed()
                    }
                }
            }
            try? await started.futureResult.get()
            return task
        }

        private func takeFrames(atMost count: Int) -> [Written] {
            outbound.withLockedValue { decoder in
                let taken = Array(decoder.frames.prefix(count))
                decoder.frames.removeFirst(taken.count)
                return taken
            }
        }

        /// Every frame written so far and not yet returned.
        func writtenFrames() async throws -> [Written] {
            await loop.run()
            while let bytes = try await channel.readOutbound(as: ByteBuffer.self) {
                try outbound.withLockedValue { try $0.consume(bytes) }
            }
            return takeFrames(atMost: .max)
        }

        /// Waits until `count` frames (not counting SETTINGS) were written and returns them.
        func waitForFrames(_ count: Int) async throws -> [Written] {
            var frames = takeFrames(atMost: count)
            while frames.count < count {
                let bytes = try await channel.waitForOutboundWrite(as: ByteBuffer.self)
                try outbound.withLockedValue { try $0.consume(bytes) }
                frames += takeFrames(atMost: count - frames.count)
            }
            return frames
        }

        /// A HEADERS block encoded as a server would (Huffman coding included).
        func headerBlock(_ headers: HPACKHeaders) throws -> ByteBuffer {
            var block = ByteBuffer()
            try responseEncoder.withLockedValue { try $0.encode(headers: headers, to: &block) }
            return block
        }

        func respond(on streamID: UInt32, status: Int, apnsID: String? = nil, body: String? = nil) async throws {
            var headers: HPACKHeaders = [":status": "\(status)"]
            if let apnsID { headers.add(name: "apns-id", value: apnsID) }
            try await send(
                .headers,
                flags: body == nil ? [.endHeaders, .endStream] : .endHeaders,
                streamID: streamID,
                payload: try headerBlock(headers)
            )
            if let body {
                try await send(.data, flags: .endStream, streamID: streamID, payload: ByteBuffer(string: body))
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

    @Test func sendsThePrefaceAndAcknowledgesTheServersSettings() async throws {
        let harness = try await Harness()
        _ = try await harness.writtenFrames()
        #expect(harness.settingsWritten.count == 1)
        #expect(harness.settingsWritten.first??[HTTP2Wire.Setting.enablePush] == 0)
        _ = try await harness.becomeReady()
        _ = try await harness.writtenFrames()
        #expect(harness.settingsWritten.count == 2)
        #expect(harness.settingsWritten.last! == nil)  // the acknowledgement
    }

    @Test func sendsHeadersAndBodyAndMatchesTheAnswer() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        let task = await harness.start()
        let frames = try await harness.waitForFrames(2)

        guard case .headers(1, let headers, let endStream, let block) = frames[0] else {
            Issue.record("expected HEADERS on stream 1, got \(frames[0])")
            return
        }
        #expect(!endStream)
        #expect(headers.first(name: ":path") == "/3/device/a1b2c3")
        #expect(headers.first(name: "authorization") == "bearer jwt-1")
        #expect(headers.first(name: ":authority") == "api.push.apple.com")
        // Values are literals without Huffman coding: the path and JWT appear as they are.
        #expect(String(buffer: block).contains("/3/device/a1b2c3"))
        #expect(String(buffer: block).contains("bearer jwt-1"))
        guard case .data(1, let body, let bodyEndsStream) = frames[1] else {
            Issue.record("expected DATA on stream 1, got \(frames[1])")
            return
        }
        #expect(bodyEndsStream)
        #expect(body == #"{"aps":{"alert":"hi"}}"#)

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
        if case .headers(_, let headers, _, _) = frames[0] {
            #expect(headers.first(name: "authorization") == "bearer jwt-2")
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

    @Test func answerSplitOverHeadersContinuationAndPaddedData() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        let task = await harness.start()
        _ = try await harness.waitForFrames(2)
        var block = try harness.headerBlock([":status": "400", "apns-id": "split"])
        let first = block.readSlice(length: 3)!
        try await harness.send(.headers, streamID: 1, payload: first)
        try await harness.send(.continuation, flags: .endHeaders, streamID: 1, payload: block)
        var padded = ByteBuffer()
        padded.writeInteger(UInt8(4))
        padded.writeString(#"{"reason":"BadDeviceToken"}"#)
        padded.writeRepeatingByte(0, count: 4)
        try await harness.send(.data, flags: [.padded, .endStream], streamID: 1, payload: padded)
        #expect(try await task.value.response == APNSResponse(status: 400, apnsID: "split", reason: .badDeviceToken))
    }

    @Test func framesSplitAcrossReadsAreReassembled() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        let task = await harness.start()
        _ = try await harness.waitForFrames(2)
        var bytes = ByteBuffer()
        let block = try harness.headerBlock([":status": "410", "apns-id": "bytewise"])
        bytes.writeHTTP2FrameHeader(length: block.readableBytes, type: .headers, flags: .endHeaders, streamID: 1)
        bytes.writeImmutableBuffer(block)
        let body = ByteBuffer(string: #"{"reason":"Unregistered","timestamp":1700000000000}"#)
        bytes.writeHTTP2FrameHeader(length: body.readableBytes, type: .data, flags: .endStream, streamID: 1)
        bytes.writeImmutableBuffer(body)
        while let byte = bytes.readSlice(length: 1) { try await harness.channel.writeInbound(byte) }
        #expect(
            try await task.value.response
                == APNSResponse(status: 410, apnsID: "bytewise", reason: .unregistered, timestampMilliseconds: 1_700_000_000_000)
        )
    }

    @Test func smallerHeaderTableIsAnnouncedAndObeyed() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        try await harness.sendSettings([(HTTP2Wire.Setting.headerTableSize, 0)])
        let task = await harness.start()
        let frames = try await harness.waitForFrames(2)
        guard case .headers(1, let headers, _, let block) = frames[0] else {
            Issue.record("expected HEADERS, got \(frames)")
            return
        }
        // The block starts with a dynamic table size update to 0 (RFC 7541 section 6.3).
        #expect(block.getInteger(at: block.readerIndex, as: UInt8.self) == 0x20)
        #expect(headers.first(name: ":path") == "/3/device/a1b2c3")
        try await harness.respond(on: 1, status: 200)
        #expect(try await task.value.response.status == 200)
    }

    @Test func interruptedHeaderBlockIsAProtocolError() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        let task = await harness.start()
        _ = try await harness.waitForFrames(2)
        let block = try harness.headerBlock([":status": "200"])
        try await harness.send(.headers, streamID: 1, payload: block)
        try await harness.send(.ping, payload: ByteBuffer(integer: UInt64(7)))
        let frames = try await harness.writtenFrames()
        #expect(frames.contains { if case .goAway(_, .protocolError) = $0 { true } else { false } })
        #expect(await Self.transportError(task)?.description.hasPrefix("connection failed") == true)
        #expect(!harness.channel.isActive)
    }

    @Test func oversizedFrameIsAFrameSizeError() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        try await harness.send(.data, streamID: 1, payload: ByteBuffer(repeating: 0, count: HTTP2Wire.defaultMaxFrameSize + 1))
        let frames = try await harness.writtenFrames()
        #expect(frames.contains { if case .goAway(_, .frameSizeError) = $0 { true } else { false } })
        #expect(!harness.channel.isActive)
    }

    @Test func bodyWaitsForFlowControlCredit() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady(initialWindowSize: 10)
        let task = await harness.start()
        var frames = try await harness.waitForFrames(2)
        guard case .data(1, let head, false) = frames[1] else {
            Issue.record("expected the first 10 body bytes, got \(frames[1])")
            return
        }
        #expect(head == #"{"aps":{"a"#)
        // A second request queues behind the first.
        let second = await harness.start()
        frames = try await harness.waitForFrames(1)
        #expect(frames.count == 1)
        if case .headers(3, _, _, _) = frames[0] {} else { Issue.record("expected HEADERS on 3, got \(frames)") }
        #expect(try await harness.writtenFrames().isEmpty)

        try await harness.send(.windowUpdate, streamID: 1, payload: ByteBuffer(integer: UInt32(100)))
        frames = try await harness.writtenFrames()
        // Stream 1 finishes its body; then stream 3 sends what its own window allows.
        guard frames.count == 2, case .data(1, let tail, true) = frames[0], case .data(3, let head3, false) = frames[1]
        else {
            Issue.record("expected the rest of stream 1's body and the start of stream 3's, got \(frames)")
            return
        }
        #expect(head + tail == #"{"aps":{"alert":"hi"}}"#)
        #expect(head3 == head)
        // A larger initial window moves the open stream's window too.
        try await harness.sendSettings([(HTTP2Wire.Setting.initialWindowSize, 100)])
        frames = try await harness.writtenFrames()
        guard frames.count == 1, case .data(3, let tail3, true) = frames[0] else {
            Issue.record("expected the rest of stream 3's body, got \(frames)")
            return
        }
        #expect(tail3 == tail)
        try await harness.respond(on: 1, status: 200)
        try await harness.respond(on: 3, status: 200)
        #expect(try await task.value.response.status == 200)
        #expect(try await second.value.response.status == 200)
    }

    @Test func serverPingIsAcknowledged() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        try await harness.send(.ping, payload: ByteBuffer(integer: UInt64(42)))
        let frames = try await harness.writtenFrames()
        guard frames.count == 1, case .ping(42, ack: true) = frames[0] else {
            Issue.record("expected PING ACK, got \(frames)")
            return
        }
    }

    @Test func pushPromiseIsAProtocolError() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        try await harness.send(.pushPromise, flags: .endHeaders, streamID: 1, payload: ByteBuffer(integer: UInt32(2)))
        let frames = try await harness.writtenFrames()
        #expect(frames.contains { if case .goAway(_, .protocolError) = $0 { true } else { false } })
        #expect(!harness.channel.isActive)
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
        #expect(frames.contains { if case .rstStream(1, .cancel) = $0 { true } else { false } })
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

    private static func goAway(lastStreamID: UInt32, debugData: String) -> ByteBuffer {
        var payload = ByteBuffer()
        payload.writeInteger(lastStreamID)
        payload.writeInteger(HTTP2Wire.ErrorCode.noError.rawValue)
        payload.writeString(debugData)
        return payload
    }

    @Test func goAwayFailsStreamsAboveTheLastIDAndDrains() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady()
        let one = await harness.start()
        let three = await harness.start()
        let five = await harness.start()
        _ = try await harness.waitForFrames(6)

        try await harness.send(.goAway, payload: Self.goAway(lastStreamID: 3, debugData: #"{"reason":"Shutdown"}"#))
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
        try await harness.send(.rstStream, streamID: 1, payload: ByteBuffer(integer: UInt32(7)))  // REFUSED_STREAM
        let resetError = await Self.transportError(reset)
        #expect(resetError?.description.hasPrefix("stream reset") == true)
        #expect(resetError?.description.contains("REFUSED_STREAM") == true)

        try await harness.channel.close()
        #expect(await Self.transportError(lost)?.description.hasPrefix("connection failed") == true)
        #expect(harness.events.contains { if case .closed = $0 { true } else { false } })
    }

    @Test func settingsChangesAreReported() async throws {
        let harness = try await Harness()
        _ = try await harness.becomeReady(maxConcurrentStreams: 1)
        try await harness.sendSettings([(HTTP2Wire.Setting.maxConcurrentStreams, 500)])
        guard case .streamLimitChanged(500) = harness.events.first else {
            Issue.record("expected streamLimitChanged(500), got \(harness.events)")
            return
        }
    }

    @Test func idleConnectionPingsAndClosesWithoutAck() async throws {
        let harness = try await Harness(pingInterval: .seconds(60), pingTimeout: .seconds(20))
        _ = try await harness.becomeReady()
        _ = try await harness.writtenFrames()
        // Inbound traffic during the first interval: no PING yet.
        await harness.loop.advanceTime(by: .seconds(60))
        #expect(try await harness.writtenFrames().isEmpty)
        // A whole idle interval: PING.
        await harness.loop.advanceTime(by: .seconds(60))
        let frames = try await harness.writtenFrames()
        guard frames.count == 1, case .ping(let data, ack: false) = frames[0] else {
            Issue.record("expected one PING, got \(frames)")
            return
        }
        // Acknowledged: the connection stays.
        try await harness.send(.ping, flags: .ack, payload: ByteBuffer(integer: data))
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
        let task = await harness.start()
        _ = try await harness.waitForFrames(2)
        // Below half the window nothing is sent; at half, the received bytes are returned.
        try await harness.send(.data, streamID: 1, payload: ByteBuffer(repeating: 0x20, count: 16_384))
        #expect(try await harness.writtenFrames().isEmpty)
        try await harness.send(.data, streamID: 1, payload: ByteBuffer(repeating: 0x20, count: 16_384))
        let frames = try await harness.writtenFrames()
        guard frames.count == 1, case .windowUpdate(0, let increment) = frames[0] else {
            Issue.record("expected a connection WINDOW_UPDATE, got \(frames)")
            return
        }
        #expect(increment == 32_768)
        try await harness.respond(on: 1, status: 200)
        #expect(try await task.value.response.status == 200)
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
        #expect(frames.contains { if case .rstStream(1, _) = $0 { true } else { false } })
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
