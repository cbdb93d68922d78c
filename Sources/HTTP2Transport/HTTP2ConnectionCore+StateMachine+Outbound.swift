import NIOCore

extension HTTP2ConnectionCore.StateMachine {
    /// Frames ``headerBlock`` as HEADERS plus, beyond the peer's frame size, CONTINUATION frames.
    mutating func writeHeaderBlock(on streamID: UInt32) {
        var type = HTTP2Wire.FrameType.headers
        repeat {
            let length = min(headerBlock.readableBytes, peerMaxFrameSize)
            let isLast = length == headerBlock.readableBytes
            output.writeHTTP2FrameHeader(length: length, type: type, flags: isLast ? .endHeaders : [], streamID: streamID)
            var fragment = headerBlock.readSlice(length: length)!
            output.writeBuffer(&fragment)
            type = .continuation
        } while headerBlock.readableBytes > 0
    }

    /// Queues waiting request bodies, oldest first, as far as the flow-control windows allow.
    mutating func sendBlockedBodies() {
        while let streamID = blockedStreams.first {
            if streams[streamID]?.unsentBody != nil {
                guard sendBody(of: streamID) else { return }
            }
            blockedStreams.removeFirst()
        }
    }

    /// Queues DATA frames for the stream's unsent body; true once all of it is queued.
    mutating func sendBody(of streamID: UInt32) -> Bool {
        guard var stream = streams[streamID], var body = stream.unsentBody else { return true }
        defer { streams[streamID] = stream }
        repeat {
            let length = min(body.readableBytes, peerMaxFrameSize, stream.sendWindow, connectionSendWindow)
            guard length > 0 || body.readableBytes == 0 else {
                stream.unsentBody = body
                return false
            }
            var chunk = body.readSlice(length: length)!
            let isLast = body.readableBytes == 0
            output.writeHTTP2FrameHeader(length: length, type: .data, flags: isLast ? .endStream : [], streamID: streamID)
            output.writeBuffer(&chunk)
            stream.sendWindow -= length
            connectionSendWindow -= length
        } while body.readableBytes > 0
        stream.unsentBody = nil
        return true
    }

    /// Queues a frame built by `writePayload` (control frames the inbound side answers with).
    mutating func queueFrame(
        type: HTTP2Wire.FrameType,
        flags: HTTP2Wire.Flags = [],
        streamID: UInt32 = 0,
        length: Int,
        _ writePayload: (inout ByteBuffer) -> Void = { _ in }
    ) {
        output.writeHTTP2FrameHeader(length: length, type: type, flags: flags, streamID: streamID)
        writePayload(&output)
    }
}
