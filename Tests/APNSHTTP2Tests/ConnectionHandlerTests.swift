import APNSCore
import PushCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOHPACK
import Testing

@testable import APNSHTTP2
@testable import APNSWire
@testable import HTTP2Transport

/// Drives ``APNSConnectionHandler`` with HTTP/2 bytes on a `NIOAsyncTestingChannel`: no sockets,
/// virtual time for deadlines and PINGs. Inbound frames are framed here and their headers
/// HPACK-encoded with Huffman coding; what the handler writes is cut into frames and decoded.
@Suite("Connection handler", .timeLimit(.minutes(1)))
struct ConnectionHandlerTests {
    private static func transportError(_ task: Task<APNSStreamOutcome, any Error>) async -> TransportError? {
        do {
            _ = try await task.value
            return nil
        } catch let error as TransportError {
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

    @Test(arguments: [true, false])
    func anErrorBeforeReadyFailsItAsTheConfigurationClassifiesIt(isTLSFailure: Bool) async throws {
        let harness = try await Harness()
        let error: any Error = isTLSFailure ? TLSFailureForTests() : ChannelError.ioOnClosedChannel
        try await harness.loop.executeInContext { harness.channel.pipeline.fireErrorCaught(error) }
        let failure = await #expect(throws: TransportError.self) { try await harness.ready.get() }
        #expect(failure?.resultReason == (isTLSFailure ? "TLSHandshakeFailed" : "ConnectionFailed"))
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
        } catch let error as HTTP2StreamNotOpened {
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
