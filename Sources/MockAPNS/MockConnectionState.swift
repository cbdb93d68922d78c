import NIOCore
import NIOHTTP2

/// One connection's stream accounting: the GOAWAY countdown, the one-stream-until-first-success
/// rule and the connection's stream concurrency. Used only on the connection's event loop, by its
/// ``MockAPNSConnectionHandler``.
final class MockConnectionState {
    private let server: MockAPNSServer
    private let channel: any Channel
    private let goAwayWriter: RawGoAwayWriter
    private let faults: MockAPNSFaults

    /// Streams whose HEADERS arrived, ignored ones included.
    private var requestsSeen = 0
    private var requestsInFlight = 0
    private var goAwayLastStreamID: HTTP2StreamID?
    private var hasSucceeded = false
    private var peakBeforeFirstSuccess = 0
    private var peakAfterFirstSuccess = 0

    init(server: MockAPNSServer, channel: any Channel, goAwayWriter: RawGoAwayWriter) {
        self.server = server
        self.channel = channel
        self.goAwayWriter = goAwayWriter
        self.faults = server.configuration.faults
    }

    /// The stream limit to advertise in the connection's first SETTINGS frame.
    static func initialStreamLimit(_ configuration: MockAPNSConfiguration) -> Int {
        configuration.faults.oneStreamUntilFirstSuccess ? 1 : configuration.maxConcurrentStreams
    }

    /// The client's stream `streamID` sent its first HEADERS frame. Returns false when the stream
    /// is above the last stream id of a GOAWAY already sent: it must be ignored (never processed
    /// or answered).
    ///
    /// The stream counts as in flight before the GOAWAY that it may trigger goes out: that write
    /// flushes answers already written, and their completion must not find the connection drained
    /// while this stream is still owed its answer.
    func requestArrived(streamID: HTTP2StreamID) -> Bool {
        requestsSeen += 1
        if let goAwayLastStreamID, streamID > goAwayLastStreamID { return false }
        requestsInFlight += 1
        if hasSucceeded {
            if requestsInFlight > peakAfterFirstSuccess {
                peakAfterFirstSuccess = requestsInFlight
                server.recordPeakConcurrentStreams(requestsInFlight, afterFirstSuccess: true)
            }
        } else if requestsInFlight > peakBeforeFirstSuccess {
            peakBeforeFirstSuccess = requestsInFlight
            server.recordPeakConcurrentStreams(requestsInFlight, afterFirstSuccess: false)
        }
        if let limit = faults.goAwayAfterRequests, requestsSeen == limit {
            goAwayLastStreamID = streamID
            server.recordGoAway()
            goAwayWriter.sendGoAway(lastStreamID: streamID, reason: #"{"reason":"Shutdown"}"#)
        }
        return true
    }

    /// A started request ended: answered with `status`, or abandoned (`nil`) because its stream
    /// closed first.
    func requestFinished(status: Int?) {
        requestsInFlight -= 1
        if status == 200, !hasSucceeded {
            hasSucceeded = true
            if faults.oneStreamUntilFirstSuccess {
                let raised = HTTP2Setting(
                    parameter: .maxConcurrentStreams,
                    value: server.configuration.maxConcurrentStreams
                )
                channel.writeAndFlush(
                    HTTP2Frame(streamID: .rootStream, payload: .settings(.settings([raised]))),
                    promise: nil
                )
            }
        }
        if goAwayLastStreamID != nil, requestsInFlight == 0 {
            // A stream's write completes when HTTP/2 took the frame, not when TLS sent it. A PING
            // written now is sent after every earlier frame, so closing when it left loses nothing.
            let channel = self.channel
            channel.writeAndFlush(
                HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: 0), ack: false))
            ).whenComplete { _ in
                channel.close(promise: nil)
            }
        }
    }
}

/// Sits between TLS and HTTP/2 and writes GOAWAY frames as raw bytes, behind NIOHTTP2's back.
///
/// Why not through NIOHTTP2: once its state machine has sent a GOAWAY it drops the streams above
/// the last stream id and treats the DATA frames the client had already sent on them as a
/// connection error, answering with a GOAWAY that resets every stream, including those it still
/// owes an answer. APNs does not do that. Here NIOHTTP2 never learns of the GOAWAY: streams above
/// the last stream id live on, unanswered, until the connection closes, while the client (which
/// did receive the GOAWAY) gives them up and resends them elsewhere.
final class RawGoAwayWriter: ChannelOutboundHandler {
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private var context: ChannelHandlerContext?

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    /// Writes GOAWAY (NO_ERROR) with `lastStreamID` and `reason` as debug data, and flushes.
    /// NIOHTTP2 writes each frame in one go on this event loop, so the bytes land between frames.
    func sendGoAway(lastStreamID: HTTP2StreamID, reason: String) {
        guard let context else { return }
        var frame = context.channel.allocator.buffer(capacity: 17 + reason.utf8.count)
        let payloadLength = 8 + reason.utf8.count
        frame.writeInteger(UInt8(truncatingIfNeeded: payloadLength >> 16))
        frame.writeInteger(UInt16(truncatingIfNeeded: payloadLength))
        frame.writeInteger(UInt8(0x7))  // GOAWAY
        frame.writeInteger(UInt8(0))  // no flags
        frame.writeInteger(UInt32(0))  // connection-level stream 0
        frame.writeInteger(UInt32(Int32(lastStreamID)) & 0x7FFF_FFFF)
        frame.writeInteger(UInt32(0))  // NO_ERROR
        frame.writeString(reason)
        context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
    }
}
