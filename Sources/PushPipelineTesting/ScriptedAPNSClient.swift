public import APNSCore
public import PushCore
import Synchronization

/// An ``APNSClientProtocol`` that answers each device token from a script and records every
/// request: APNs' answers (429, 410, 500, a lost connection…) on demand, without a network.
public final class ScriptedAPNSClient: APNSClientProtocol {
    /// One answer of a script.
    public enum Answer: Sendable {
        /// APNs answers with this status, reason and (for a 410) the time it learned that the
        /// token is no longer valid, in milliseconds since 1970.
        case status(Int, APNSReason? = nil, timestamp: Int64? = nil)
        /// No answer arrives: the request fails with this error.
        case transport(TransportError)
    }

    /// What a token answers once its script has run out.
    public enum Afterwards: Sendable {
        /// 200, as it answers a token without a script.
        case accept
        /// The script's last answer, again and again.
        case repeatLast
    }

    private let scripts: Mutex<[String: [Answer]]>
    private let afterwards: Afterwards
    private let requests = Mutex<[(request: APNSRequest, environment: APNSEnvironment)]>([])

    /// `scripts[token]` is the sequence of answers to requests for that device token; every
    /// other token is answered 200.
    public init(scripts: [String: [Answer]] = [:], afterwards: Afterwards = .accept) {
        self.scripts = Mutex(scripts)
        self.afterwards = afterwards
    }

    public func send(_ request: APNSRequest, environment: APNSEnvironment, deadline: ContinuousClock.Instant) async throws -> APNSResponse {
        requests.withLock { $0.append((request, environment)) }
        let answer = scripts.withLock { scripts -> Answer in
            guard var script = scripts[request.deviceToken], !script.isEmpty else { return .status(200) }
            let answer = script.count == 1 && afterwards == .repeatLast ? script[0] : script.removeFirst()
            scripts[request.deviceToken] = script
            return answer
        }
        switch answer {
        case .status(let status, let reason, let timestamp):
            return APNSResponse(status: status, apnsID: request.apnsID, reason: reason, timestampMilliseconds: timestamp)
        case .transport(let error):
            throw error
        }
    }

    /// Every request sent, oldest first, with the environment it was sent to.
    public var sent: [(request: APNSRequest, environment: APNSEnvironment)] { requests.withLock { $0 } }

    /// How many requests were sent for `token`.
    public func callCount(_ token: String) -> Int {
        requests.withLock { $0.count { $0.request.deviceToken == token } }
    }
}
