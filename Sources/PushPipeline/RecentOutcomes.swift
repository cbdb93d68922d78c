import DeviceTokenStore

/// A bounded map of the outcomes recorded most recently, oldest dropped first.
struct RecentOutcomes: Sendable {
    private let capacity: Int
    private var outcomes: [String: RecordedDelivery] = [:]
    private var order: [String] = []
    private var oldest = 0

    init(capacity: Int) {
        self.capacity = capacity
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
