import APNSCore
public import PushCore

/// How long and how often Herald tries one notification before reporting `failed`.
public struct RetryPolicy: Sendable, Hashable {
    /// Attempts per notification, the first included (HERALD_RETRY_MAX_ATTEMPTS).
    public var maxAttempts: Int
    /// Time from consuming the event after which no new attempt starts (HERALD_DELIVERY_DEADLINE_S).
    public var deliveryDeadline: Duration
    /// Longest wait for APNs' answer to one request.
    public var requestTimeout: Duration
    /// The wait between attempts.
    public var backoff: Backoff
    /// How the whole sender slows down while APNs answers 500/503 or connections fail (and
    /// each Firebase project's sends while FCM does).
    public var loadShedding: LoadSheddingPolicy
    /// The least wait after FCM's QUOTA_EXCEEDED before the next attempt (Google asks for a
    /// minute); it doubles with each further QUOTA_EXCEEDED of the notification.
    public var quotaExceededWait: Duration = .seconds(60)

    public init(
        maxAttempts: Int = 12,
        deliveryDeadline: Duration = .seconds(300),
        requestTimeout: Duration = .seconds(10),
        initialBackoff: Duration = .milliseconds(100),
        maximumBackoff: Duration = .seconds(30),
        loadShedding: LoadSheddingPolicy = LoadSheddingPolicy()
    ) {
        self.maxAttempts = max(1, maxAttempts)
        self.deliveryDeadline = deliveryDeadline
        self.requestTimeout = requestTimeout
        self.backoff = Backoff(initial: initialBackoff, maximum: maximumBackoff)
        self.loadShedding = loadShedding
    }

    /// Upper bound of the first backoff; doubles per attempt.
    public var initialBackoff: Duration {
        get { backoff.initial }
        set { backoff.initial = newValue }
    }

    /// Cap on any single backoff.
    public var maximumBackoff: Duration {
        get { backoff.maximum }
        set { backoff.maximum = newValue }
    }
}
