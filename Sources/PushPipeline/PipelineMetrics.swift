import Synchronization

/// Counters of what the pipeline did, and one gauge of its crash window, exposed at /metrics in
/// Prometheus' text format.
public final class PipelineMetrics: Sendable {
    private let consumed = Atomic<Int>(0)
    private let deadLettered = Atomic<Int>(0)
    private let unregisteredPublished = Atomic<Int>(0)
    private let commits = Atomic<Int>(0)
    private let republished = Atomic<Int>(0)
    private let results = Mutex<[DeliveryResult.Status: Int]>([:])
    private let unrecordedOutcomes: @Sendable () -> Int
    private let permanentPublishErrors: @Sendable () -> [String: Int]

    /// `unrecordedOutcomes` counts the outcomes APNs answered that are not yet in the delivery
    /// ledger; `permanentPublishErrors` the permanent broker errors seen, by cause.
    init(
        unrecordedOutcomes: @escaping @Sendable () -> Int,
        permanentPublishErrors: @escaping @Sendable () -> [String: Int]
    ) {
        self.unrecordedOutcomes = unrecordedOutcomes
        self.permanentPublishErrors = permanentPublishErrors
    }

    func recordConsumed(_ count: Int) { consumed.add(count, ordering: .relaxed) }
    func recordDeadLetter() { deadLettered.add(1, ordering: .relaxed) }
    func recordUnregisteredPublished() { unregisteredPublished.add(1, ordering: .relaxed) }
    func recordCommit() { commits.add(1, ordering: .relaxed) }
    func recordRepublished() { republished.add(1, ordering: .relaxed) }
    func recordResult(_ status: DeliveryResult.Status) { results.withLock { $0[status, default: 0] += 1 } }

    /// Results published so far with `status`.
    public func resultCount(_ status: DeliveryResult.Status) -> Int {
        results.withLock { $0[status] ?? 0 }
    }

    /// Messages sent to the dead-letter topic so far.
    public var deadLetterCount: Int { deadLettered.load(ordering: .relaxed) }

    /// The Prometheus text exposition of every counter.
    public func prometheusText() -> String {
        var lines = [
            "# TYPE herald_messages_consumed_total counter",
            "herald_messages_consumed_total \(consumed.load(ordering: .relaxed))",
            "# TYPE herald_dead_letters_total counter",
            "herald_dead_letters_total \(deadLetterCount)",
            "# TYPE herald_unregistered_published_total counter",
            "herald_unregistered_published_total \(unregisteredPublished.load(ordering: .relaxed))",
            "# TYPE herald_offset_commits_total counter",
            "herald_offset_commits_total \(commits.load(ordering: .relaxed))",
            "# TYPE herald_results_republished_total counter",
            "herald_results_republished_total \(republished.load(ordering: .relaxed))",
            "# TYPE herald_results_total counter",
        ]
        for status in DeliveryResult.Status.allCases {
            lines.append("herald_results_total{status=\"\(status.rawValue)\"} \(resultCount(status))")
        }
        lines.append("# TYPE herald_publish_permanent_errors_total counter")
        for (cause, count) in permanentPublishErrors().sorted(by: { $0.key < $1.key }) {
            lines.append("herald_publish_permanent_errors_total{cause=\"\(cause)\"} \(count)")
        }
        // What a crash now would push a second time (besides answers still on their way).
        lines += [
            "# TYPE herald_ledger_unrecorded_outcomes gauge",
            "herald_ledger_unrecorded_outcomes \(unrecordedOutcomes())",
        ]
        return lines.joined(separator: "\n") + "\n"
    }
}
