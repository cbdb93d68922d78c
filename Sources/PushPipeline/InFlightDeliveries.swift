import DeviceTokenStore

/// The (event, token) deliveries this process is sending, and the outcomes it recorded lately:
/// a copy of an event (a duplicate on push.requests) never pushes a device that another copy is
/// pushing or has pushed, even when its ledger lookup ran before that outcome was recorded.
struct InFlightDeliveries: Sendable {
    enum Claim {
        /// The caller sends, and settles the claim once the outcome is recorded.
        case claimed
        /// Recorded lately: the caller republishes this outcome.
        case recorded(RecordedDelivery)
        /// Another copy is sending: the caller tries again later.
        case busy
    }

    private var sending: Set<String> = []
    private var recent: RecentOutcomes

    init(recentCapacity: Int) {
        recent = RecentOutcomes(capacity: recentCapacity)
    }

    /// The key of (event, token).
    static func key(eventID: String, token: String) -> String {
        eventID + "/" + token
    }

    mutating func claim(_ key: String) -> Claim {
        if let outcome = recent[key] { return .recorded(outcome) }
        return sending.insert(key).inserted ? .claimed : .busy
    }

    /// Ends a claim with the outcome that stands in the ledger.
    mutating func settle(_ key: String, with outcome: RecordedDelivery) {
        recent.insert(outcome, key: key)
        sending.remove(key)
    }
}
