import PushCore
import NIOCore
import NIOHPACK

extension HTTP2ConnectionCore.StateMachine {
    /// What one inbound frame asks of the channel handler.
    enum FrameAction {
        /// A stream ended with an answer or an error.
        case finishStream(FinishedStream)
        /// The server's first SETTINGS arrived: the handshake is complete with this stream limit.
        case ready(streamLimit: Int)
        case streamLimitChanged(Int)
        /// The PING this client sent was acknowledged.
        case pingAcknowledged
        /// GOAWAY: the connection takes no new streams; `refused` were never processed by the server.
        case goingAway(GoAway)
        /// A protocol violation: a GOAWAY naming it is in ``output``; flush it and close.
        case connectionError(HTTP2Wire.ConnectionError, failReady: TransportError?)
    }

    struct GoAway {
        var event: HTTP2ConnectionEvent
        var failReady: TransportError?
        /// Streams above the GOAWAY's last stream ID.
        var refused: [FinishedStream]
        /// No stream is left open: close now.
        var closeConnection: Bool
    }

    /// Bytes read from the connection; ``nextFrameAction()`` then handles the frames they complete.
    mutating func bytesReceived(_ bytes: ByteBuffer) {
        receivedSinceLastPingCheck = true
        reader.append(bytes)
    }

    /// Handles received frames until one needs the handler; nil when no complete frame is left.
    mutating func nextFrameAction() -> FrameAction? {
        guard !isClosed, !sentConnectionError else { return nil }
        do {
            while let frame = try reader.nextFrame() {
                if let action = try received(frame) { return action }
            }
            return nil
        } catch {
            return connectionError(error)
        }
    }

    private mutating func connectionError(_ error: HTTP2Wire.ConnectionError) -> FrameAction {
        let failReady = failConnecting(.connectionFailed("HTTP/2 \(error)"))
        sentConnectionError = true
        queueFrame(type: .goAway, length: 8) {
            $0.writeInteger(UInt32(0))
            $0.writeInteger(error.code.rawValue)
        }
        startDraining()
        return .connectionError(error, failReady: failReady)
    }

    private mutating func received(_ frame: HTTP2Wire.Frame) throws(HTTP2Wire.ConnectionError) -> FrameAction? {
        if let partial = partialHeaderBlock, frame.type != .continuation || frame.streamID != partial.streamID {
            throw HTTP2Wire.ConnectionError(code: .protocolError, detail: "header block interrupted by another frame")
        }
        switch frame.type {
        case .data:
            return try receivedData(frame)
        case .headers:
            return try receivedHeaders(frame)
        case .continuation:
            return try receivedContinuation(frame)
        case .rstStream:
            try expect(frame, onStream: true, length: 4)
            let code = HTTP2Wire.ErrorCode(rawValue: frame.payload.getInteger(at: frame.payload.readerIndex)!)
            let error = TransportError.streamReset("\(Exchange.peerName) reset the stream (\(code))")
            return finish(frame.streamID, with: .failure(error)).map(FrameAction.finishStream)
        case .settings:
            return try receivedSettings(frame)
        case .ping:
            try expect(frame, onStream: false, length: 8)
            return receivedPing(frame)
        case .goAway:
            return try receivedGoAway(frame)
        case .windowUpdate:
            return try receivedWindowUpdate(frame)
        case .pushPromise:
            throw HTTP2Wire.ConnectionError(code: .protocolError, detail: "PUSH_PROMISE although push is disabled")
        default:
            return nil  // PRIORITY and unknown frame types are ignored (RFC 9113 sections 5.5 and 6.3).
        }
    }

    private func expect(
        _ frame: HTTP2Wire.Frame,
        onStream: Bool,
        length: Int? = nil
    ) throws(HTTP2Wire.ConnectionError) {
        guard (frame.streamID != 0) == onStream else {
            throw HTTP2Wire.ConnectionError(
                code: .protocolError,
                detail: "frame type \(frame.type.rawValue) on stream \(frame.streamID)"
            )
        }
        if let length, frame.payload.readableBytes != length {
            throw HTTP2Wire.ConnectionError(
                code: .frameSizeError,
                detail: "frame type \(frame.type.rawValue) with \(frame.payload.readableBytes) bytes"
            )
        }
    }

    private mutating func receivedData(_ frame: HTTP2Wire.Frame) throws(HTTP2Wire.ConnectionError) -> FrameAction? {
        try expect(frame, onStream: true)
        // Every DATA byte, padding included and whatever the stream's fate, uses connection window.
        receivedSinceWindowUpdate += frame.payload.readableBytes
        if receivedSinceWindowUpdate >= Self.windowUpdateThreshold {
            let increment = UInt32(receivedSinceWindowUpdate)
            queueFrame(type: .windowUpdate, length: 4) { $0.writeInteger(increment) }
            receivedSinceWindowUpdate = 0
        }
        var payload = frame.payload
        try payload.removeHTTP2Padding(flags: frame.flags)
        // Through the dictionary, not a copy of the stream: a copy would share the body's storage
        // and make the append copy it.
        if streams[frame.streamID]?.bodyCutOff == false {
            let kept = streams[frame.streamID]!.body?.readableBytes ?? 0
            if kept + payload.readableBytes > exchange.maximumBodyBytes(of: streams[frame.streamID]!.answer) {
                streams[frame.streamID]!.bodyCutOff = true
            } else if streams[frame.streamID]!.body == nil {
                streams[frame.streamID]!.body = payload
            } else {
                streams[frame.streamID]!.body!.writeBuffer(&payload)
            }
        }
        return frame.flags.contains(.endStream) ? complete(frame.streamID) : nil
    }

    private mutating func receivedHeaders(_ frame: HTTP2Wire.Frame) throws(HTTP2Wire.ConnectionError) -> FrameAction? {
        try expect(frame, onStream: true)
        var fragment = frame.payload
        try fragment.removeHTTP2Padding(flags: frame.flags)
        if frame.flags.contains(.priority) {
            guard fragment.readableBytes >= 5 else {
                throw HTTP2Wire.ConnectionError(code: .frameSizeError, detail: "HEADERS too short for its priority")
            }
            fragment.moveReaderIndex(forwardBy: 5)
        }
        let endStream = frame.flags.contains(.endStream)
        guard frame.flags.contains(.endHeaders) else {
            partialHeaderBlock = PartialHeaderBlock(streamID: frame.streamID, endStream: endStream, fragments: fragment)
            return nil
        }
        return try receivedHeaderBlock(&fragment, on: frame.streamID, endStream: endStream)
    }

    private mutating func receivedContinuation(_ frame: HTTP2Wire.Frame) throws(HTTP2Wire.ConnectionError) -> FrameAction? {
        guard var partial = partialHeaderBlock else {
            throw HTTP2Wire.ConnectionError(code: .protocolError, detail: "CONTINUATION without a header block")
        }
        var fragment = frame.payload
        partial.fragments.writeBuffer(&fragment)
        guard partial.fragments.readableBytes <= Self.maxHeaderListSize else {
            throw HTTP2Wire.ConnectionError(code: .protocolError, detail: "header block too large")
        }
        guard frame.flags.contains(.endHeaders) else {
            partialHeaderBlock = partial
            return nil
        }
        partialHeaderBlock = nil
        return try receivedHeaderBlock(&partial.fragments, on: partial.streamID, endStream: partial.endStream)
    }

    /// Decodes every header block (even for finished streams: HPACK state is per connection) and
    /// keeps the status, and what the exchange keeps of the other headers, of a stream still waiting.
    private mutating func receivedHeaderBlock(
        _ block: inout ByteBuffer,
        on streamID: UInt32,
        endStream: Bool
    ) throws(HTTP2Wire.ConnectionError) -> FrameAction? {
        let headers: HPACKHeaders
        do {
            headers = try decoder.decodeHeaders(from: &block)
        } catch {
            throw HTTP2Wire.ConnectionError(code: .compressionError, detail: "undecodable header block: \(error)")
        }
        guard streams[streamID] != nil else { return nil }
        var status: Int?
        for header in headers {
            if header.name == ":status" {
                status = Int(header.value)
            } else {
                exchange.headerReceived(name: header.name, value: header.value, into: &streams[streamID]!.answer)
            }
        }
        if let status {
            if (100..<200).contains(status) { return nil }  // informational; the real answer follows
            streams[streamID]!.status = status
        }
        return endStream ? complete(streamID) : nil
    }

    private mutating func receivedSettings(_ frame: HTTP2Wire.Frame) throws(HTTP2Wire.ConnectionError) -> FrameAction? {
        try expect(frame, onStream: false)
        if frame.flags.contains(.ack) {
            guard frame.payload.readableBytes == 0 else {
                throw HTTP2Wire.ConnectionError(code: .frameSizeError, detail: "SETTINGS acknowledgement with a payload")
            }
            return nil
        }
        guard frame.payload.readableBytes % 6 == 0 else {
            throw HTTP2Wire.ConnectionError(code: .frameSizeError, detail: "SETTINGS payload not a multiple of 6")
        }
        var payload = frame.payload
        var limit: Int?
        while let identifier = payload.readInteger(as: UInt16.self), let value = payload.readInteger(as: UInt32.self) {
            switch identifier {
            case HTTP2Wire.Setting.headerTableSize:
                exchange.peerAllowsTableSize(Int(value))
            case HTTP2Wire.Setting.maxConcurrentStreams:
                limit = Int(value)
            case HTTP2Wire.Setting.initialWindowSize:
                try peerInitialWindowSizeChanged(to: Int(value))
            case HTTP2Wire.Setting.maxFrameSize:
                guard (HTTP2Wire.defaultMaxFrameSize...16_777_215).contains(Int(value)) else {
                    throw HTTP2Wire.ConnectionError(code: .protocolError, detail: "SETTINGS_MAX_FRAME_SIZE \(value)")
                }
                peerMaxFrameSize = Int(value)
            default:
                break
            }
        }
        queueFrame(type: .settings, flags: .ack, length: 0)

        switch lifecycle {
        case .connecting:
            let streamLimit = limit ?? Self.streamLimitWhenUnlimited
            becomeReady(streamLimit: streamLimit)
            return .ready(streamLimit: streamLimit)
        case .ready, .draining:
            guard let limit, limit != remoteStreamLimit else { return nil }
            remoteStreamLimit = limit
            return .streamLimitChanged(limit)
        case .closed:
            return nil
        }
    }

    /// A new SETTINGS_INITIAL_WINDOW_SIZE moves every open stream's window by the difference.
    private mutating func peerInitialWindowSizeChanged(to size: Int) throws(HTTP2Wire.ConnectionError) {
        guard size <= HTTP2Wire.maxWindowSize else {
            throw HTTP2Wire.ConnectionError(code: .flowControlError, detail: "SETTINGS_INITIAL_WINDOW_SIZE \(size)")
        }
        let delta = size - peerInitialWindowSize
        peerInitialWindowSize = size
        guard delta != 0 else { return }
        for streamID in streams.keys {
            streams[streamID]!.sendWindow += delta
            guard streams[streamID]!.sendWindow <= HTTP2Wire.maxWindowSize else {
                throw HTTP2Wire.ConnectionError(code: .flowControlError, detail: "stream window above 2^31-1")
            }
        }
        if delta > 0 { sendBlockedBodies() }
    }

    private mutating func receivedWindowUpdate(_ frame: HTTP2Wire.Frame) throws(HTTP2Wire.ConnectionError) -> FrameAction? {
        guard frame.payload.readableBytes == 4 else {
            throw HTTP2Wire.ConnectionError(code: .frameSizeError, detail: "WINDOW_UPDATE of \(frame.payload.readableBytes) bytes")
        }
        let increment = Int(frame.payload.getInteger(at: frame.payload.readerIndex, as: UInt32.self)! & 0x7fff_ffff)
        if frame.streamID == 0 {
            guard increment > 0, connectionSendWindow + increment <= HTTP2Wire.maxWindowSize else {
                throw HTTP2Wire.ConnectionError(code: .flowControlError, detail: "connection WINDOW_UPDATE of \(increment)")
            }
            connectionSendWindow += increment
        } else if let window = streams[frame.streamID]?.sendWindow {
            guard increment > 0, window + increment <= HTTP2Wire.maxWindowSize else {
                reset(frame.streamID, code: .flowControlError)
                let error = TransportError.streamReset("invalid WINDOW_UPDATE")
                return finish(frame.streamID, with: .failure(error)).map(FrameAction.finishStream)
            }
            streams[frame.streamID]!.sendWindow = window + increment
        }
        sendBlockedBodies()
        return nil
    }

    private mutating func receivedPing(_ frame: HTTP2Wire.Frame) -> FrameAction? {
        let data = frame.payload.getInteger(at: frame.payload.readerIndex, as: UInt64.self)!
        guard !frame.flags.contains(.ack) else {
            guard data == outstandingPing else { return nil }
            outstandingPing = nil
            return .pingAcknowledged
        }
        queueFrame(type: .ping, flags: .ack, length: 8) { $0.writeInteger(data) }
        return nil
    }

    private mutating func receivedGoAway(_ frame: HTTP2Wire.Frame) throws(HTTP2Wire.ConnectionError) -> FrameAction {
        try expect(frame, onStream: false)
        var payload = frame.payload
        guard let last = payload.readInteger(as: UInt32.self), let code = payload.readInteger(as: UInt32.self) else {
            throw HTTP2Wire.ConnectionError(code: .frameSizeError, detail: "GOAWAY shorter than 8 bytes")
        }
        let lastStreamID = last & 0x7fff_ffff
        let errorCode = HTTP2Wire.ErrorCode(rawValue: code)
        let reason = payload.readableBytes > 0 ? Exchange.goAwayReason(debugData: payload) : nil
        let failReady = failConnecting(
            .connectionFailed("GOAWAY during the handshake (\(reason ?? "\(errorCode)"))")
        )
        if case .ready = lifecycle { startDraining() }
        // Streams above the last stream ID were never processed: their callers retry elsewhere.
        let refusedError = TransportError.streamReset(
            "GOAWAY (\(reason ?? "\(errorCode)")): \(Exchange.peerName) did not process the stream"
        )
        let refused = streams.keys.filter { $0 > lastStreamID }.compactMap {
            finish($0, with: .failure(Exchange.unprocessedStreamError(refusedError)))
        }
        return .goingAway(
            GoAway(
                event: .goingAway(errorCode: errorCode, reason: reason),
                failReady: failReady,
                refused: refused,
                closeConnection: isDrained
            )
        )
    }

    /// The stream's answer is complete: its outcome, or an error when it carried no status.
    private mutating func complete(_ streamID: UInt32) -> FrameAction? {
        guard let stream = streams[streamID] else { return nil }
        guard let status = stream.status else {
            let error = TransportError.streamReset("\(Exchange.peerName) ended the stream without a status")
            return finish(streamID, with: .failure(error)).map(FrameAction.finishStream)
        }
        if stream.unsentBody != nil {
            // Answered before the whole body was sent (RFC 9113 section 8.1): stop sending it.
            reset(streamID, code: .noError)
        }
        let outcome = exchange.outcome(status: status, answer: stream.answer, body: stream.body, bodyCutOff: stream.bodyCutOff)
        return finish(streamID, with: .success(outcome)).map(FrameAction.finishStream)
    }
}
