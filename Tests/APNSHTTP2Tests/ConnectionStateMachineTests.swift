import APNSCore
import PushCore
import NIOCore
import NIOHPACK
import Testing

@testable import APNSWire
@testable import HTTP2Transport

/// Drives ``APNSConnectionHandler/StateMachine`` directly: no channel, no event loop, no timers.
/// Waiters are plain request numbers; inbound frames are built here and what the machine queues
/// is decoded with the handler tests' decoder.
@Suite("Connection state machine")
struct ConnectionStateMachineTests {
    typealias Machine = APNSConnectionHandler.StateMachine<Int>

    /// A machine with its frame decoder; `ready` has already seen the server's SETTINGS.
    struct Connection {
        var machine = Machine(authority: "api.push.apple.com", providerToken: "jwt-1")
        var written = ConnectionHandlerTests.OutboundDecoder()
        var responseEncoder = HPACKEncoder(allocator: ByteBufferAllocator())

        static func ready(settings: [(UInt16, Int)] = [(HTTP2Wire.Setting.maxConcurrentStreams, 10)]) throws -> Connection {
            var connection = Connection()
            connection.machine.channelActive()
            let actions = connection.receive(Connection.settings(settings))
            guard case .ready = actions.first else {
                Issue.record("not ready: \(actions)")
                return connection
            }
            _ = try connection.frames()
            return connection
        }

        /// Every frame queued since the last call (SETTINGS apart, in ``written``).
        mutating func frames() throws -> [ConnectionHandlerTests.Written] {
            let bytes = machine.output
            machine.outputWritten(bytes)
            try written.consume(bytes)
            defer { written.frames = [] }
            return written.frames
        }

        mutating func receive(_ bytes: ByteBuffer) -> [Machine.FrameAction] {
            machine.bytesReceived(bytes)
            var actions: [Machine.FrameAction] = []
            while let action = machine.nextFrameAction() { actions.append(action) }
            return actions
        }

        mutating func start(
            _ waiter: Int,
            payload: String = #"{"aps":{"alert":"hi"}}"#,
            deadline: NIODeadline = .uptimeNanoseconds(60_000_000_000)
        ) -> Machine.StartStreamAction {
            let request = APNSRequest(
                deviceToken: "a1b2c3",
                topic: "com.example.shop",
                pushType: .alert,
                priority: .immediate,
                apnsID: "00000000-0000-4000-8000-00000000000\(waiter % 10)",
                payload: Array(payload.utf8)
            )
            return machine.startStream(requestID: UInt64(waiter), request: request, deadline: deadline, waiter: waiter)
        }

        mutating func answer(
            _ streamID: UInt32,
            status: Int,
            body: String? = nil,
            headers extra: HPACKHeaders = ["apns-id": "placeholder"]
        ) throws -> [Machine.FrameAction] {
            var headers: HPACKHeaders = [":status": "\(status)"]
            for (name, value, _) in extra {
                headers.add(name: name, value: name == "apns-id" && value == "placeholder" ? "id-\(streamID)" : value)
            }
            var block = ByteBuffer()
            try responseEncoder.encode(headers: headers, to: &block)
            var bytes = Connection.frame(.headers, flags: body == nil ? [.endHeaders, .endStream] : .endHeaders, streamID: streamID, block)
            if let body {
                bytes.writeImmutableBuffer(Connection.frame(.data, flags: .endStream, streamID: streamID, ByteBuffer(string: body)))
            }
            return receive(bytes)
        }

        static func frame(
            _ type: HTTP2Wire.FrameType,
            flags: HTTP2Wire.Flags = [],
            streamID: UInt32 = 0,
            _ payload: ByteBuffer = ByteBuffer()
        ) -> ByteBuffer {
            var bytes = ByteBuffer()
            bytes.writeHTTP2FrameHeader(length: payload.readableBytes, type: type, flags: flags, streamID: streamID)
            bytes.writeImmutableBuffer(payload)
            return bytes
        }

        static func settings(_ settings: [(UInt16, Int)]) -> ByteBuffer {
            var payload = ByteBuffer()
            for (identifier, value) in settings {
                payload.writeInteger(identifier)
                payload.writeInteger(UInt32(value))
            }
            return frame(.settings, payload)
        }

        static func goAway(lastStreamID: UInt32, code: HTTP2Wire.ErrorCode = .noError) -> ByteBuffer {
            var payload = ByteBuffer()
            payload.writeInteger(lastStreamID)
            payload.writeInteger(code.rawValue)
            return frame(.goAway, payload)
        }

        static func windowUpdate(streamID: UInt32, increment: UInt32) -> ByteBuffer {
            var payload = ByteBuffer()
            payload.writeInteger(increment)
            return frame(.windowUpdate, streamID: streamID, payload)
        }
    }

    private static func finished(_ actions: [Machine.FrameAction]) -> [Machine.FinishedStream] {
        actions.compactMap { if case .finishStream(let finished) = $0 { finished } else { nil } }
    }

    private static func transportError(_ result: Result<APNSStreamOutcome, any Error>) -> TransportError? {
        if case .failure(let error) = result { error as? TransportError } else { nil }
    }

    @Test func becomesReadyOnTheServersFirstSettingsAndAcknowledgesThem() throws {
        var connection = Connection()
        connection.machine.channelActive()
        #expect(connection.machine.output.getBytes(at: 0, length: HTTP2Wire.clientPreface.count) == HTTP2Wire.clientPreface)
        if case .failed(let waiter, let error, _, _) = connection.start(1) {
            #expect(waiter == 1)
            #expect(error is HTTP2StreamNotOpened, "a request before the handshake is not sent")
        } else {
            Issue.record("a stream started before the handshake")
        }

        let actions = connection.receive(Connection.settings([(HTTP2Wire.Setting.maxConcurrentStreams, 7)]))
        guard case .ready(let limit) = actions.first, actions.count == 1 else {
            Issue.record("expected ready, got \(actions)")
            return
        }
        #expect(limit == 7)
        _ = try connection.frames()
        #expect(connection.written.settings.count == 2, "this client's SETTINGS, then the acknowledgement")
        #expect(connection.written.settings.last! == nil)

        #expect(connection.receive(Connection.settings([(HTTP2Wire.Setting.maxConcurrentStreams, 3)])).count == 1)
        #expect(connection.receive(Connection.settings([(HTTP2Wire.Setting.maxConcurrentStreams, 3)])).isEmpty, "an unchanged limit is no news")
    }

    @Test func aStreamsAnswerReachesItsWaiterWithTheReason() throws {
        var connection = try Connection.ready()
        guard case .started = connection.start(1), case .started = connection.start(2) else {
            Issue.record("streams did not start")
            return
        }
        let frames = try connection.frames()
        #expect(frames.map(\.streamID) == [1, 1, 3, 3], "HEADERS and DATA on streams 1 and 3")
        #expect(connection.machine.openStreamCount == 2)

        let finished = Self.finished(
            try connection.answer(3, status: 410, body: #"{"reason":"Unregistered","timestamp":1700000000123}"#)
        )
        #expect(finished.count == 1)
        #expect(finished.first?.waiter == 2)
        #expect(finished.first?.closeConnection == false)
        let response = try finished.first?.result.get().response
        #expect(response?.status == 410)
        #expect(response?.reason == .unregistered)
        #expect(response?.timestampMilliseconds == 1_700_000_000_123)
        #expect(response?.apnsID == "id-3")
        #expect(connection.machine.openStreamCount == 1)
    }

    @Test func bodiesWaitForFlowControlCreditInOrder() throws {
        var connection = try Connection.ready(settings: [(HTTP2Wire.Setting.initialWindowSize, 8)])
        let first = String(repeating: "a", count: 20)
        _ = connection.start(1, payload: first)
        _ = connection.start(2, payload: "bb")
        var frames = try connection.frames()
        #expect(
            frames.map(\.description) == [
                frames[0].description, "DATA(1, aaaaaaaa, end: false)", frames[2].description,
            ], "8 bytes of the first body; the second waits behind it")

        #expect(connection.receive(Connection.windowUpdate(streamID: 1, increment: 100)).isEmpty)
        frames = try connection.frames()
        #expect(frames.map(\.description) == ["DATA(1, aaaaaaaaaaaa, end: true)", "DATA(3, bb, end: true)"])
    }

    @Test func goAwayRefusesUnprocessedStreamsThenClosesWhenTheRestFinish() throws {
        var connection = try Connection.ready()
        for waiter in 1...3 { _ = connection.start(waiter) }
        _ = try connection.frames()

        let actions = connection.receive(Connection.goAway(lastStreamID: 1))
        guard case .goingAway(let goAway) = actions.first else {
            Issue.record("expected GOAWAY, got \(actions)")
            return
        }
        #expect(goAway.refused.map(\.waiter).sorted() == [2, 3])
        #expect(goAway.refused.allSatisfy { Self.transportError($0.result).map { "\($0)" }?.contains("did not process") == true })
        #expect(!goAway.closeConnection, "stream 1 is still answered")
        if case .failed(_, let error, _, _) = connection.start(4) {
            #expect((error as? HTTP2StreamNotOpened)?.transportError.description.contains("draining") == true)
        } else {
            Issue.record("a draining connection opened a stream")
        }

        let finished = Self.finished(try connection.answer(1, status: 200))
        #expect(finished.map(\.waiter) == [1])
        #expect(finished.first?.closeConnection == true, "the last stream of a draining connection closes it")
    }

    @Test func aProtocolViolationQueuesGoAwayAndStopsReading() throws {
        var connection = try Connection.ready()
        _ = connection.start(1)
        _ = try connection.frames()
        var promise = ByteBuffer()
        promise.writeInteger(UInt32(2))
        let actions = connection.receive(Connection.frame(.pushPromise, flags: .endHeaders, streamID: 1, promise))
        guard case .connectionError(let error, let failReady) = actions.first, actions.count == 1 else {
            Issue.record("expected a connection error, got \(actions)")
            return
        }
        #expect(error.code == .protocolError)
        #expect(failReady == nil, "the handshake had finished")
        #expect(try connection.frames().map(\.description) == ["GOAWAY(0, PROTOCOL_ERROR)"])
        #expect(connection.receive(Connection.settings([])).isEmpty, "nothing is read after the violation")

        let closed = connection.machine.channelClosed(streamError: .connectionFailed("closed"), reportClosure: true)
        #expect(closed.failedWaiters == [1])
    }

    @Test func oneDeadlineTimerServesEveryStream() throws {
        var connection = try Connection.ready()
        let seconds = { (value: Int64) in NIODeadline.uptimeNanoseconds(UInt64(value) * 1_000_000_000) }
        guard case .started(let arm1) = connection.start(1, deadline: seconds(10)),
            case .started(let arm2) = connection.start(2, deadline: seconds(20)),
            case .started(let arm3) = connection.start(3, deadline: seconds(5))
        else {
            Issue.record("streams did not start")
            return
        }
        #expect(arm1 == seconds(10))
        #expect(arm2 == nil, "a later deadline needs no timer work")
        #expect(arm3 == seconds(5), "an earlier one re-arms")
        _ = try connection.frames()

        var fired = connection.machine.deadlineTimerFired(now: seconds(5))
        #expect(fired.expired.map(\.waiter) == [3])
        #expect(fired.armDeadlineTimer == seconds(10))
        #expect(try connection.frames().map(\.description) == ["RST_STREAM(5, CANCEL)"])
        fired = connection.machine.deadlineTimerFired(now: seconds(15))
        #expect(fired.expired.map(\.waiter) == [1])
        #expect(fired.armDeadlineTimer == seconds(20))
        #expect(Self.transportError(fired.expired[0].result)?.isDeadlineExceeded == true)
    }

    @Test func pingsOnlyAnIdleConnectionAndItsAckClearsThePing() throws {
        var connection = try Connection.ready()
        #expect(connection.receive(Connection.frame(.ping, ByteBuffer(integer: UInt64(42)))).isEmpty)
        #expect(try connection.frames().map(\.description) == ["PING(42, ack: true)"])

        guard case .checkAgain = connection.machine.pingCheckFired() else {
            Issue.record("bytes arrived during the interval: no PING")
            return
        }
        guard case .sentPing(let data) = connection.machine.pingCheckFired() else {
            Issue.record("an idle interval sends a PING")
            return
        }
        #expect(try connection.frames().map(\.description) == ["PING(\(data), ack: false)"])
        guard case .checkAgain = connection.machine.pingCheckFired() else {
            Issue.record("one PING at a time")
            return
        }
        #expect(connection.machine.pingAckTimedOut(data: data))

        let actions = connection.receive(Connection.frame(.ping, flags: .ack, ByteBuffer(integer: data)))
        guard case .pingAcknowledged = actions.first else {
            Issue.record("expected the ACK, got \(actions)")
            return
        }
        #expect(!connection.machine.pingAckTimedOut(data: data))
    }

    @Test func closingFailsEveryStreamOnceAndReportsOnce() throws {
        var connection = try Connection.ready()
        for waiter in 1...2 { _ = connection.start(waiter) }
        let closed = connection.machine.channelClosed(streamError: .connectionFailed("gone"), reportClosure: true)
        #expect(closed.failedWaiters.sorted() == [1, 2])
        guard case .closed(let failure)? = closed.event else {
            Issue.record("expected a closed event")
            return
        }
        #expect(failure == nil, "the handshake had succeeded")
        let again = connection.machine.channelClosed(streamError: .connectionFailed("gone"), reportClosure: true)
        #expect(again.failedWaiters.isEmpty)
        #expect(again.event == nil)
        #expect(connection.machine.nextFrameAction() == nil)
    }

    @Test func aHandshakeThatFailsIsReportedOnceWithItsCause() {
        var connection = Connection()
        connection.machine.channelActive()
        #expect(connection.machine.handshakeCompleted(negotiatedProtocol: "h2") == nil)
        let failure = connection.machine.handshakeCompleted(negotiatedProtocol: "http/1.1")
        #expect(failure.map { "\($0)" }?.contains("http/1.1") == true)
        #expect(connection.machine.handshakeTimedOut() == nil, "already failed")
        let closed = connection.machine.channelClosed(streamError: .connectionFailed("gone"), reportClosure: true)
        #expect(closed.failReady == nil)
        guard case .closed(let cause)? = closed.event else {
            Issue.record("expected a closed event")
            return
        }
        #expect(cause.map { "\($0)" }?.contains("http/1.1") == true)
    }

    @Test func gracefulCloseWaitsForOpenStreams() throws {
        var connecting = Connection()
        guard case .closeNow(let failReady) = connecting.machine.closeGracefully(), failReady?.isShuttingDown == true else {
            Issue.record("closing while connecting fails the handshake and closes now")
            return
        }

        var connection = try Connection.ready()
        _ = connection.start(1)
        guard case .closeAfterGracePeriod(.none) = connection.machine.closeGracefully() else {
            Issue.record("an open stream gets the grace period")
            return
        }
        #expect(Self.finished(try connection.answer(1, status: 200)).first?.closeConnection == true)
    }

    @Test func runningOutOfStreamIDsDrainsTheConnection() throws {
        var connection = try Connection.ready()
        connection.machine.nextStreamID = Machine.lastStreamID
        guard case .failed(let waiter, let error, let event, let close) = connection.start(1) else {
            Issue.record("a stream beyond the last ID was opened")
            return
        }
        #expect(waiter == 1)
        #expect(error is HTTP2StreamNotOpened)
        #expect(close, "nothing else is open")
        guard case .goingAway(.noError, _)? = event else {
            Issue.record("expected goingAway, got \(String(describing: event))")
            return
        }
    }

    @Test func cancellingResetsTheStream() throws {
        var connection = try Connection.ready()
        _ = connection.start(1)
        _ = try connection.frames()
        let finished = connection.machine.cancelStream(requestID: 1)
        #expect(finished?.waiter == 1)
        #expect(throws: CancellationError.self) { try finished?.result.get() }
        #expect(try connection.frames().map(\.description) == ["RST_STREAM(1, CANCEL)"])
        #expect(connection.machine.cancelStream(requestID: 1) == nil)
    }

    @Test func channelAnswersCarryTheirIDsAndAManagementAnswerItsBody() throws {
        var connection = try Connection.ready()
        let broadcast = APNSRequest(
            channelID: "dHN0LXNyY2gtY2hubA==",
            bundleID: "com.example.scores",
            priority: .immediate,
            requestID: "0f0e0d0c-0b0a-5908-8706-050403020100",
            expiration: 0,
            payload: Array(#"{"aps":{}}"#.utf8)
        )
        let list = APNSRequest(channelOperation: .list, bundleID: "com.example.scores", requestID: "r")
        for (waiter, request) in [(1, broadcast), (2, list)] {
            guard
                case .started = connection.machine.startStream(
                    requestID: UInt64(waiter), request: request, deadline: .uptimeNanoseconds(1 << 40), waiter: waiter)
            else {
                Issue.record("stream \(waiter) did not start")
                return
            }
        }
        let frames = try connection.frames()
        guard case .headers(1, let sent, _, _) = frames.first else {
            Issue.record("expected the broadcast's HEADERS, got \(frames)")
            return
        }
        #expect(sent.first(name: ":path") == "/4/broadcasts/apps/com.example.scores")
        #expect(sent.first(name: "apns-channel-id") == "dHN0LXNyY2gtY2hubA==")
        #expect(sent.first(name: "apns-request-id") == "0f0e0d0c-0b0a-5908-8706-050403020100")
        #expect(sent.first(name: "apns-topic") == nil && sent.first(name: "apns-id") == nil)

        let delivered = Self.finished(
            try connection.answer(
                1,
                status: 200,
                body: #"{"ignored":true}"#,
                headers: ["apns-request-id": "0f0e0d0c-0b0a-5908-8706-050403020100", "apns-unique-id": "u-1"]
            )
        )
        let answer = try #require(try delivered.first?.result.get().response)
        #expect(answer.apnsID == "0f0e0d0c-0b0a-5908-8706-050403020100")
        #expect(answer.uniqueID == "u-1")
        #expect(answer.body == nil, "a push's success body is not kept")

        let listed = Self.finished(try connection.answer(3, status: 200, body: #"{"channels":["a"]}"#, headers: [:]))
        let listAnswer = try #require(try listed.first?.result.get().response)
        #expect(listAnswer.body.map { String(decoding: $0, as: UTF8.self) } == #"{"channels":["a"]}"#)
        #expect(listAnswer.reason == nil)
    }
}
