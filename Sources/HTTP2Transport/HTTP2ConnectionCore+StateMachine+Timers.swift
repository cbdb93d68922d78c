import PushCore
import NIOCore

/// The connection's timers: one deadline timer for every stream, and the PING check.
extension HTTP2ConnectionCore.StateMachine {
    /// The deadline timer fired at `now`: streams past their deadline are reset and returned.
    mutating func deadlineTimerFired(now: NIODeadline) -> DeadlineAction {
        armedDeadline = nil
        var expired: [UInt32] = []
        var nextDeadline: NIODeadline?
        for (streamID, stream) in streams {
            if stream.deadline <= now {
                expired.append(streamID)
            } else if nextDeadline.map({ stream.deadline < $0 }) ?? true {
                nextDeadline = stream.deadline
            }
        }
        var action = DeadlineAction(expired: [], armDeadlineTimer: nil)
        let error = TransportError.deadlineExceeded("no answer from \(Exchange.peerName) before the deadline")
        for streamID in expired {
            reset(streamID, code: .cancel)
            if let finished = finish(streamID, with: .failure(error)) { action.expired.append(finished) }
        }
        if let nextDeadline { action.armDeadlineTimer = deadlineToArm(for: nextDeadline) }
        return action
    }

    /// The PING timer fired: a PING goes out when nothing arrived for a whole interval.
    mutating func pingCheckFired() -> PingCheckAction {
        switch lifecycle {
        case .ready, .draining: break
        case .connecting, .closed: return .stop
        }
        if receivedSinceLastPingCheck {
            receivedSinceLastPingCheck = false
            return .checkAgain
        }
        guard outstandingPing == nil else { return .checkAgain }
        pingCounter &+= 1
        outstandingPing = pingCounter
        output.writeHTTP2FrameHeader(length: 8, type: .ping, streamID: 0)
        output.writeInteger(pingCounter)
        return .sentPing(pingCounter)
    }

    /// The time for the ACK of PING `data` ran out; true when it is still missing (close the connection).
    func pingAckTimedOut(data: UInt64) -> Bool {
        outstandingPing == data
    }
}
