import DeviceTokenStore

/// A bounded map of the outcomes recorded most recently, oldest dropped first.
///
/// Its storage is reserved in full up front: growing it by doubling rehashed and copied every
/// entry inside the pipeline's lock, 6 % of Herald's CPU in a 100,000-notification run
/// (`perf record -g` of `herald-bench pipeline`; BENCHMARKS.md).
struct RecentOutcomes: Sendable {
    private let capacity: Int
    private var outcomes: [String: RecordedDelivery] = [:]
    private var order: [String] = []
    private var oldest = 0

    init(capacity: Int) {
        self.capacity = capacity
        outcomes.reserveCapacity(capacity)
        order.reserveCapacity(capacity)
    }

    subscript(key: String) -> RecordedDelivery? { outcomes[key] }

    mutating func insert(_ outcome: RecordedDelivery, key: String) {
        guard outcomes.updateValue(outcome, forKey: key) == nil else { return }
        if order.count < capacity {
            order.append(key)
        } else {
            outcomes[order[oldest]] = nil
            order[oldest] = key
            oldest = (oldest + 1) % capacity
        }
    }
}
