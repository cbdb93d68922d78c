/// Faults a ``MockAPNSServer`` injects so clients can be tested against an APNs that sheds load,
/// answers slowly, drains connections and limits streams. Everything is off by default.
///
/// A faulted request is answered with its error (or not at all) and never counts as an accepted push.
public struct MockAPNSFaults: Sendable, Hashable {
    /// Share of requests answered 429 TooManyRequests, drawn per request; 0...1.
    public var tooManyRequestsFraction: Double
    /// Share of requests answered 500 InternalServerError, drawn per request; 0...1.
    public var internalServerErrorFraction: Double
    /// Share of requests answered 503 ServiceUnavailable, drawn per request; 0...1.
    public var serviceUnavailableFraction: Double
    /// Time added before a request is processed and answered; `nil` adds none.
    ///
    /// The request is processed when the delay ends: a request whose stream the client reset
    /// meanwhile (for example at its deadline) is never processed, counted or answered.
    public var latency: Latency?
    /// After this many requests on one connection the server sends GOAWAY (NO_ERROR, JSON reason
    /// `Shutdown`) naming the last of them as last-stream-id, answers the streams up to it, ignores
    /// any above it (the client must resend those elsewhere) and closes the connection. `nil`: never.
    public var goAwayAfterRequests: Int?
    /// Apple's rule for token authentication: a connection allows one stream until a request
    /// succeeded. The server then advertises SETTINGS_MAX_CONCURRENT_STREAMS 1 and raises it to
    /// ``MockAPNSConfiguration/maxConcurrentStreams`` with a new SETTINGS frame after the first 200.
    public var oneStreamUntilFirstSuccess: Bool
    /// Seed of the random draws (statuses, latencies), for reproducible runs; `nil` seeds randomly.
    /// The draws follow the order in which requests complete, which concurrency can reorder.
    public var seed: UInt64?

    /// How long answers are delayed and which requests are delayed.
    public struct Latency: Sendable, Hashable {
        /// Which requests get the added latency.
        public struct Scope: Sendable, Hashable {
            enum Backing: Sendable, Hashable {
                case everyRequest
                case firstRequestPerToken
                case fraction(Double)
                case tokens(Set<String>)
            }
            let backing: Backing

            /// Every request.
            public static let everyRequest = Scope(backing: .everyRequest)
            /// Only the first request the server sees for each device token (so a retry is fast).
            public static let firstRequestPerToken = Scope(backing: .firstRequestPerToken)
            /// A share (0...1) of requests, drawn per request.
            public static func fraction(_ share: Double) -> Scope {
                Scope(backing: .fraction(min(max(share, 0), 1)))
            }
            /// Every request for one of these device tokens (hex, compared case-insensitively),
            /// so one stream of a batch can be made the slow one.
            public static func tokens(_ deviceTokens: Set<String>) -> Scope {
                Scope(backing: .tokens(Set(deviceTokens.map { $0.lowercased() })))
            }
        }

        /// The shortest added delay.
        public var minimum: Duration
        /// The longest added delay; each delayed request draws uniformly from `minimum...maximum`.
        public var maximum: Duration
        public var scope: Scope

        /// A delay drawn uniformly from `range` for the requests `scope` selects.
        public init(_ range: ClosedRange<Duration>, scope: Scope = .everyRequest) {
            self.minimum = max(range.lowerBound, .zero)
            self.maximum = max(range.upperBound, self.minimum)
            self.scope = scope
        }

        /// The same `delay` for the requests `scope` selects.
        public init(fixed delay: Duration, scope: Scope = .everyRequest) {
            self.init(delay...delay, scope: scope)
        }
    }

    /// No faults.
    public static let none = MockAPNSFaults()

    /// Creates a fault set; every parameter defaults to "off". Fractions are clamped to 0...1.
    public init(
        tooManyRequestsFraction: Double = 0,
        internalServerErrorFraction: Double = 0,
        serviceUnavailableFraction: Double = 0,
        latency: Latency? = nil,
        goAwayAfterRequests: Int? = nil,
        oneStreamUntilFirstSuccess: Bool = false,
        seed: UInt64? = nil
    ) {
        self.tooManyRequestsFraction = Self.clamped(tooManyRequestsFraction)
        self.internalServerErrorFraction = Self.clamped(internalServerErrorFraction)
        self.serviceUnavailableFraction = Self.clamped(serviceUnavailableFraction)
        self.latency = latency
        self.goAwayAfterRequests = goAwayAfterRequests.map { max(1, $0) }
        self.oneStreamUntilFirstSuccess = oneStreamUntilFirstSuccess
        self.seed = seed
    }

    /// True when any error status is injected.
    var injectsStatuses: Bool {
        tooManyRequestsFraction > 0 || internalServerErrorFraction > 0 || serviceUnavailableFraction > 0
    }

    private static func clamped(_ fraction: Double) -> Double {
        fraction.isFinite ? min(max(fraction, 0), 1) : 0
    }
}
