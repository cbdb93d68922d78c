import APNSCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOHPACK
import Testing

@testable import APNSHTTP2
@testable import APNSWire
@testable import HTTP2Transport

/// The handler tests' harness: a handler on a `NIOAsyncTestingChannel`, inbound frames built
/// here, and what the handler writes decoded (also used by the state machine's tests).
extension ConnectionHandlerTests {
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

    /// The error the harness's handler classifies as a TLS failure.
    struct TLSFailureForTests: Error {}

    final class Harness: Sendable {
        let loop: NIOAsyncTestingEventLoop
        let channel: NIOAsyncTestingChannel
        let handler: NIOLoopBound<APNSConnectionHandler>
        let ready: EventLoopFuture<Int>
        private let recordedEvents = NIOLockedValueBox<[HTTP2ConnectionEvent]>([])
        private let requestIDs = NIOLockedValueBox<UInt64>(0)
        private let outbound = NIOLockedValueBox(OutboundDecoder())
        private let responseEncoder = NIOLockedValueBox(HPACKEncoder(allocator: ByteBufferAllocator()))

        var events: [HTTP2ConnectionEvent] { recordedEvents.withLockedValue { $0 } }
        var settingsWritten: [[UInt16: UInt32]?] { outbound.withLockedValue { $0.settings } }

        init(pingInterval: TimeAmount = .seconds(60), pingTimeout: TimeAmount = .seconds(20)) async throws {
            let loop = NIOAsyncTestingEventLoop()
            let channel = NIOAsyncTestingChannel(loop: loop)
            let recordedEvents = self.recordedEvents
            let configuration = APNSConnectionHandler.Configuration(
                authority: "api.push.apple.com",
                handshakeTimeout: .seconds(10),
                pingInterval: pingInterval,
                pingTimeout: pingTimeout,
                isTLSFailure: { $0 is TLSFailureForTests }
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
}
