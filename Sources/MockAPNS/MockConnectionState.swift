import NIOCore
import NIOHTTP2

/// What one connection's stream handlers share: the GOAWAY countdown, the one-stream-until-first-
/// success rule and the connection's stream concurrency.
///
/// Stream channels run on their connection's event loop, so the state is confined to that loop
/// (the stream initializer reaches it through `NIOLoopBound`).
final class MockConnectionState {
    private let server: MockAPNSServer
    private let channel: any Channel
    private let faults: MockAPNSFaults

    private var requestsStarted = 0
    private var requestsInFlight = 0
    private var goAwayLastStreamID: HTTP2StreamID?
    private var hasSucceeded = false
    private var peakBeforeFirstSuccess = 0
    private var peakAfterFirstSuccess = 0

    init(server: MockAPNSServer, channel: any Channel) {
        self.server = server
        self.channel = channel
        self.faults = server.configuration.faults
    }

    /// Whether this connection sent its GOAWAY.
    var hasSentGoAway: Bool { goAwayLastStreamID != nil }

    /// The stream limit to advertise in the connection's first SETTINGS frame.
    static func initialStreamLimit(_ configuration: MockAPNSConfiguration) -> Int {
        configuration.faults.oneStreamUntilFirstSuccess ? 1 : configuration.maxConcurrentStreams
    }

    /// A request's HEADERS arrived on `streamID`. Returns false when the stream is above the last
    /// stream id of a GOAWAY already sent: it must be ignored (never processed or answered).
    func requestStarted(streamID: HTTP2StreamID) -> Bool {
        if let goAwayLastStreamID, streamID > goAwayLastStreamID { return false }
        requestsStarted += 1
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
        if let limit = faults.goAwayAfterRequests, requestsStarted == limit, goAwayLastStreamID == nil {
            sendGoAway(lastStreamID: streamID)
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

    private func sendGoAway(lastStreamID: HTTP2StreamID) {
        goAwayLastStreamID = lastStreamID
        server.recordGoAway()
        let reason = channel.allocator.buffer(string: #"{"reason":"Shutdown"}"#)
        channel.writeAndFlush(
            HTTP2Frame(
                streamID: .rootStream,
                payload: .goAway(lastStreamID: lastStreamID, errorCode: .noError, opaqueData: reason)
            ),
            promise: nil
        )
    }
}
