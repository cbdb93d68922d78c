import JSONCore
import PushCore

/// A push service's answer to one request.
public struct WebPushResponse: Sendable, Hashable {
    /// The HTTP status (201 on success).
    public var status: Int
    /// The `Location` of a 201: the message's URL at the push service (the result's `webpush_location`).
    public var location: String?
    /// The wait `Retry-After` asked for, from when the answer arrived; nil without the header.
    public var retryAfter: Duration?
    /// A short reason from an error body: Apple's `reason`, Mozilla's `errno`, else nil.
    public var reason: String?

    public init(status: Int, location: String? = nil, retryAfter: Duration? = nil, reason: String? = nil) {
        self.status = status
        self.location = location
        self.retryAfter = retryAfter
        self.reason = reason
    }

    /// Reads an answer: `status`, its `Location` and `Retry-After` headers (the latter against
    /// `nowMilliseconds` of the wall clock), and a JSON error body when there is one.
    public init(status: Int, body: some Collection<UInt8>, location: String?, retryAfterHeader: String?, nowMilliseconds: Int64) {
        self.init(status: status, location: (200..<300).contains(status) ? location : nil)
        retryAfter = retryAfterHeader.flatMap { RetryAfter.parse($0, nowMilliseconds: nowMilliseconds) }
        if !(200..<300).contains(status), let object = try? JSONValue(parsing: body) {
            // Apple: {"reason":"BadJwtToken"}; Mozilla's autopush: {"code":410,"errno":106,...}.
            reason = object["reason"]?.stringValue ?? object["errno"].flatMap { if case .number(let errno) = $0 { "errno \(errno)" } else { nil } }
        }
    }

    /// What this answer means for the notification: ``WebPushDecision/classify(_:)``.
    public var decision: WebPushDecision { WebPushDecision.classify(self) }
}

/// What a push service's answer means for one notification (docs/design.md, "Talking to push services").
public enum WebPushDecision: Sendable, Hashable {
    /// 2xx (201 Created, 202 Accepted): the service took the message.
    case delivered
    /// 404 or 410: the subscription is gone. Mark the row and publish push.unregistered.
    case unregistered
    /// The service refused the message and a retry cannot help; nothing is marked. 400 (headers
    /// or encryption), 413 (too large), any other 4xx but 429; `vapidProblem` for 401 and 403,
    /// the operator's VAPID key or contact refused, counted and alerted on.
    case rejected(vapidProblem: Bool)
    /// 429 (no sooner than `Retry-After`) and 5xx: try again with the usual backoff;
    /// `serverTrouble` for 5xx.
    case retry(notBefore: Duration?, serverTrouble: Bool)

    public static func classify(_ response: WebPushResponse) -> WebPushDecision {
        switch response.status {
        case 200..<300: .delivered
        case 404, 410: .unregistered
        case 401, 403: .rejected(vapidProblem: true)
        case 429: .retry(notBefore: response.retryAfter, serverTrouble: false)
        case 500...599: .retry(notBefore: response.retryAfter, serverTrouble: true)
        default: .rejected(vapidProblem: false)
        }
    }
}
