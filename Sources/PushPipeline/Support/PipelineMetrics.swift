import PushStores
import PushCore
import APNSCore
import FCMCore
public import Metrics
import Synchronization

/// What the pipeline does, through swift-metrics: the embedder picks the backend (Herald exports
/// them with swift-prometheus on /metrics). Names follow Prometheus' conventions; docs/operations.md
/// lists each.
public final class PipelineMetrics: Sendable {
    /// The pipeline's stages, each timed per call (`herald_stage_duration_seconds{stage}`).
    public enum Stage: String, Sendable, CaseIterable {
        /// One poll of the consumer.
        case poll
        /// A poll batch's lookups until every app's devices are known (includes `ledgerLookup`).
        case tokenLookup = "token_lookup"
        /// A poll batch's recorded outcomes, looked up with its first app's devices in one statement.
        case ledgerLookup = "ledger_lookup"
        /// One delivery-ledger write (a batch of outcomes).
        case ledgerWrite = "ledger_write"
        /// Publishing a batch of results until the broker acknowledged them all.
        case resultPublish = "result_publish"
        /// One offset commit.
        case offsetCommit = "offset_commit"
    }

    let sender: SenderMetrics
    private let consumed: [InputLane.Priority: Counter]
    /// By lane, platform (nil: a user without devices) and status.
    private let results: [InputLane.Priority: [DevicePlatform?: [DeviceResult.Status: Counter]]]
    private let republished: Counter
    private let lookupsBeyondRetention: Counter
    private let unregisteredPublished: Counter
    private let commits: Counter
    private let rebalances: [String: Counter]
    private let stages: [Stage: Timer]
    private let endToEnd: [InputLane.Priority: Timer]
    private let untilHandedToBroker: [InputLane.Priority: Timer]
    private let deadLetters: LabelledCounters
    private let permanentPublishErrors: LabelledCounters
    private let publishErrors: LabelledCounters
    private let channelCommands: LabelledCounters
    private let inFlightMessages: [InputLane.Priority: Gauge]
    private let inFlightSends: Gauge
    private let unrecordedOutcomes: Gauge
    private let assignedPartitions: [InputLane.Priority: Gauge]
    private let pausedPartitions: [InputLane.Priority: Gauge]
    private let storeErrors: Counter
    private let fencedSends: Counter
    private let permanentStoreErrors: LabelledCounters
    private let storeOperations: Gauge
    private let abandonedStoreOperations: Gauge
    private let storeOperationsInFlight = Atomic(0)

    /// Creates the pipeline's metrics with `factory` (swift-metrics' global one by default).
    public init(factory: any MetricsFactory = MetricsSystem.factory) {
        sender = SenderMetrics(factory: factory)
        /// One metric per lane (`lane="urgent"` or `"bulk"`).
        func perLane<Metric>(_ make: (InputLane.Priority) -> Metric) -> [InputLane.Priority: Metric] {
            Dictionary(uniqueKeysWithValues: InputLane.Priority.allCases.map { ($0, make($0)) })
        }
        consumed = perLane { Counter(label: "herald_messages_consumed_total", dimensions: [("lane", $0.label)], factory: factory) }
        results = perLane { lane in
            Dictionary(
                uniqueKeysWithValues: ([nil] + DevicePlatform.allCases.map(Optional.some)).map { platform in
                    (
                        platform,
                        Dictionary(
                            uniqueKeysWithValues: DeviceResult.Status.allCases.map {
                                let dimensions = [("status", $0.rawValue), ("lane", lane.label), ("platform", platform?.rawValue ?? "none")]
                                return ($0, Counter(label: "herald_results_total", dimensions: dimensions, factory: factory))
                            }
                        )
                    )
                }
            )
        }
        republished = Counter(label: "herald_results_republished_total", factory: factory)
        lookupsBeyondRetention = Counter(label: "herald_ledger_lookups_beyond_retention_total", factory: factory)
        unregisteredPublished = Counter(label: "herald_unregistered_published_total", factory: factory)
        commits = Counter(label: "herald_offset_commits_total", factory: factory)
        rebalances = Dictionary(
            uniqueKeysWithValues: ["assigned", "revoked"].map {
                ($0, Counter(label: "herald_rebalances_total", dimensions: [("event", $0)], factory: factory))
            }
        )
        stages = Dictionary(
            uniqueKeysWithValues: Stage.allCases.map {
                ($0, Timer(label: "herald_stage_duration_seconds", dimensions: [("stage", $0.rawValue)], factory: factory))
            }
        )
        endToEnd = perLane { Timer(label: "herald_notification_duration_seconds", dimensions: [("lane", $0.label)], factory: factory) }
        untilHandedToBroker = perLane {
            Timer(label: "herald_notification_ready_duration_seconds", dimensions: [("lane", $0.label)], factory: factory)
        }
        // Known label values start at 0, so a rate over them is defined before the first one.
        deadLetters = LabelledCounters(
            "herald_dead_letters_total",
            label: "code",
            initialValues: InputRejection.Code.allCases.map(\.rawValue),
            factory: factory
        )
        permanentPublishErrors = LabelledCounters(
            "herald_publish_permanent_errors_total",
            label: "cause",
            initialValues: ["_UNKNOWN_TOPIC", "TOPIC_AUTHORIZATION_FAILED", "MSG_SIZE_TOO_LARGE"],
            factory: factory
        )
        publishErrors = LabelledCounters("herald_publish_errors_total", label: "cause", factory: factory)
        channelCommands = LabelledCounters("herald_channel_commands_total", labels: ("action", "status"), factory: factory)
        inFlightMessages = perLane { Gauge(label: "herald_in_flight_messages", dimensions: [("lane", $0.label)], factory: factory) }
        inFlightSends = Gauge(label: "herald_in_flight_sends", factory: factory)
        unrecordedOutcomes = Gauge(label: "herald_ledger_unrecorded_outcomes", factory: factory)
        assignedPartitions = perLane { Gauge(label: "herald_assigned_partitions", dimensions: [("lane", $0.label)], factory: factory) }
        pausedPartitions = perLane { Gauge(label: "herald_paused_partitions", dimensions: [("lane", $0.label)], factory: factory) }
        storeErrors = Counter(label: "herald_postgres_errors_total", factory: factory)
        fencedSends = Counter(label: "herald_sends_fenced_total", factory: factory)
        permanentStoreErrors = LabelledCounters(
            "herald_postgres_permanent_errors_total",
            label: "sqlstate",
            initialValues: ["42P01", "42501"],
            factory: factory
        )
        storeOperations = Gauge(label: "herald_postgres_operations_in_flight", factory: factory)
        abandonedStoreOperations = Gauge(label: "herald_postgres_abandoned_operations", factory: factory)
    }

    func recordConsumed(_ count: Int, lane: InputLane.Priority) { consumed[lane]?.increment(by: count) }
    func recordDeadLetter(_ code: InputRejection.Code) { deadLetters.increment(code.rawValue) }
    func recordUnregisteredPublished() { unregisteredPublished.increment() }
    func recordCommit() { commits.increment() }
    func recordRepublished() { republished.increment() }
    /// Events looked up whose record is older than the ledger's retention: their outcomes may
    /// have been dropped, so a redelivery of one may push again.
    func recordLedgerLookupsBeyondRetention(_ count: Int) {
        if count > 0 { lookupsBeyondRetention.increment(by: count) }
    }
    func recordResult(_ status: DeviceResult.Status, lane: InputLane.Priority, platform: DevicePlatform?) {
        results[lane]?[platform]?[status]?.increment()
    }
    func recordRebalance(assigned: Bool) { rebalances[assigned ? "assigned" : "revoked"]?.increment() }
    func recordPermanentPublishError(_ cause: String) { permanentPublishErrors.increment(cause) }
    func recordPublishError(_ cause: String) { publishErrors.increment(cause) }
    func recordStoreError() { storeErrors.increment() }
    func recordFencedSend() { fencedSends.increment() }
    func recordPermanentStoreError(_ sqlState: String) { permanentStoreErrors.increment(sqlState) }
    func recordChannelCommand(_ action: ChannelCommand.Action, _ status: ChannelCommandResult.Status) {
        channelCommands.increment(action.rawValue, status.rawValue)
    }
    func storeOperationStarted() { storeOperationsInFlight.add(1, ordering: .relaxed) }
    func storeOperationEnded() { storeOperationsInFlight.subtract(1, ordering: .relaxed) }

    /// Records how long `stage` took from `start` until now.
    func recordStage(_ stage: Stage, since start: ContinuousClock.Instant) {
        stages[stage]?.record(duration: start.duration(to: PipelineClock.now))
    }

    /// Records a result's time, in `lane`, from its message's poll to its hand-over to the
    /// producer (its ledger record written) and to its publication (the broker's acknowledgement).
    func recordPublished(
        lane: InputLane.Priority,
        consumedAt: ContinuousClock.Instant,
        handedOver: ContinuousClock.Instant,
        now: ContinuousClock.Instant
    ) {
        untilHandedToBroker[lane]?.record(duration: consumedAt.duration(to: handedOver))
        endToEnd[lane]?.record(duration: consumedAt.duration(to: now))
    }

    /// Sets the gauges of the pipeline's current state.
    func recordState(
        inFlightSends sends: Int,
        unrecordedOutcomes unrecorded: Int,
        abandonedStoreOperations abandoned: Int
    ) {
        abandonedStoreOperations.record(abandoned)
        inFlightSends.record(sends)
        unrecordedOutcomes.record(unrecorded)
        storeOperations.record(storeOperationsInFlight.load(ordering: .relaxed))
    }

    /// Sets the gauges of one input lane: its messages in flight, its partitions, paused or not.
    func recordLaneState(_ lane: InputLane.Priority, inFlightMessages messages: Int, assigned: Int, paused: Bool) {
        inFlightMessages[lane]?.record(messages)
        assignedPartitions[lane]?.record(assigned)
        pausedPartitions[lane]?.record(paused ? assigned : 0)
    }
}

/// What the sender does: every APNs and FCM answer by status and reason, retries by cause, and
/// each APNs request's duration (FCM's is `herald_fcm_request_duration_seconds`, its client's).
public struct SenderMetrics: Sendable {
    private let responses: LabelledCounters
    private let retries: LabelledCounters
    private let requestDuration: Timer
    private let fcmResponses: LabelledCounters
    private let fcmRetries: LabelledCounters
    private let webPushResponses: LabelledCounters
    private let webPushRetries: LabelledCounters

    public init(factory: any MetricsFactory = MetricsSystem.factory) {
        responses = LabelledCounters("herald_apns_responses_total", labels: ("status", "reason"), factory: factory)
        retries = LabelledCounters("herald_apns_retries_total", label: "cause", factory: factory)
        requestDuration = Timer(label: "herald_apns_request_duration_seconds", factory: factory)
        // QUOTA_EXCEEDED's series exists at 0 from the start, for HeraldFCMQuotaExceeded's rate.
        fcmResponses = LabelledCounters(
            "herald_fcm_responses_total", labels: ("status", "reason"), initialValues: [("429", "QUOTA_EXCEEDED")], factory: factory)
        fcmRetries = LabelledCounters("herald_fcm_retries_total", label: "cause", initialValues: ["QUOTA_EXCEEDED"], factory: factory)
        // 401 and 403 exist at 0 from the start, for HeraldWebPushVAPIDRefused's rate.
        webPushResponses = LabelledCounters(
            "herald_webpush_responses_total", label: "status", initialValues: ["201", "401", "403"], factory: factory)
        webPushRetries = LabelledCounters("herald_webpush_retries_total", label: "cause", initialValues: ["429"], factory: factory)
    }

    /// Counts a web push attempt's outcome: the push service's status, or the transport cause
    /// (`none` when no answer came).
    func recordWebPushAttempt(status: Int?, cause: String?) {
        webPushResponses.increment(status.map(Self.webPushStatusLabel) ?? cause.map(Self.webPushCauseLabel) ?? "none")
    }

    /// Counts a web push retry by the status that caused it, or the transport cause.
    func recordWebPushRetry(status: Int?, cause: String?) {
        webPushRetries.increment(status.map(Self.webPushStatusLabel) ?? cause.map(Self.webPushCauseLabel) ?? "none")
    }

    /// The statuses RFC 8030 and the push services document keep their own label; any other is `other`.
    static func webPushStatusLabel(_ status: Int) -> String {
        [200, 201, 202, 400, 401, 403, 404, 410, 413, 429, 500, 502, 503, 504].contains(status) ? String(status) : "other"
    }

    /// Herald's transport causes keep their own label; anything else is `unknown`.
    static func webPushCauseLabel(_ cause: String) -> String {
        ["ConnectionFailed", "TLSHandshakeFailed", "Timeout", "StreamReset"].contains(cause) ? cause : "unknown"
    }

    /// Counts an FCM attempt's outcome: FCM's status and reason (its `errorCode`, else the
    /// canonical status), or the transport cause with status `none` when FCM did not answer.
    func recordFCMAttempt(status: Int?, reason: String?) {
        fcmResponses.increment(Self.fcmStatusLabel(status), Self.fcmReasonLabel(reason))
    }

    /// Counts an FCM retry and its cause (the reason FCM gave, else its status, or the transport cause).
    func recordFCMRetry(status: Int?, reason: String?) {
        fcmRetries.increment(reason.map(Self.fcmReasonLabel) ?? Self.fcmStatusLabel(status))
    }

    /// FCM's documented statuses keep their own label; any other is `other`.
    static func fcmStatusLabel(_ status: Int?) -> String {
        guard let status else { return "none" }
        return [200, 400, 401, 403, 404, 429, 500, 502, 503, 504].contains(status) ? String(status) : "other"
    }

    /// FCM's documented error codes, the canonical statuses of `google.rpc.Status` and Herald's
    /// transport causes keep their own label; anything else is `unknown` (the result keeps it).
    static func fcmReasonLabel(_ reason: String?) -> String {
        guard let reason else { return "none" }
        if FCMErrorCode(rawValue: reason).isKnown || canonicalStatuses.contains(reason) || fcmTransportCauses.contains(reason) {
            return reason
        }
        return "unknown"
    }

    private static let canonicalStatuses: Set<String> = [
        "INVALID_ARGUMENT", "UNAUTHENTICATED", "PERMISSION_DENIED", "NOT_FOUND", "RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL",
        "DEADLINE_EXCEEDED", "UNKNOWN",
    ]
    private static let fcmTransportCauses: Set<String> = [
        "ConnectionFailed", "TLSHandshakeFailed", "Timeout", "StreamReset", "AccessTokenUnavailable", "NoCredentialForPackage",
    ]

    /// Counts an attempt's outcome: APNs' status and reason, or the transport cause with status
    /// `none` when APNs did not answer.
    func recordAttempt(status: Int?, reason: String?, duration: Duration) {
        responses.increment(Self.statusLabel(status), Self.reasonLabel(reason))
        requestDuration.record(duration: duration)
    }

    /// Counts a retry and its cause (APNs' status, or the transport cause).
    func recordRetry(status: Int?, transportCause: String?) {
        retries.increment(status != nil ? Self.statusLabel(status) : Self.reasonLabel(transportCause))
    }

    /// The statuses of Apple's provider API keep their own label; any other is `other`, so a
    /// misbehaving peer cannot make a label per number.
    static func statusLabel(_ status: Int?) -> String {
        guard let status else { return "none" }
        return knownStatuses.contains(status) ? String(status) : "other"
    }

    /// Apple's known reasons and Herald's transport causes keep their own label; a reason Apple
    /// adds later is counted as `unknown` (the result keeps it verbatim), so labels stay bounded.
    static func reasonLabel(_ reason: String?) -> String {
        guard let reason else { return "none" }
        if transportCauses.contains(reason) { return reason }
        if !APNSReason(reason).isKnown { return "unknown" }
        return reason
    }

    private static let knownStatuses: Set<Int> = [200, 201, 204, 400, 403, 404, 405, 410, 413, 429, 500, 503]
    private static let transportCauses: Set<String> = ["ConnectionFailed", "TLSHandshakeFailed", "Timeout", "StreamReset", "NoCredentialForTopic"]
}

/// Counters of one metric told apart by one or two label values, each made on first use.
final class LabelledCounters: Sendable {
    private let name: String
    private let labels: (String, String?)
    private let factory: any MetricsFactory
    private let counters = Mutex<[Key: Counter]>([:])

    /// One label; the counters of `initialValues` are made (at 0) at once.
    init(_ name: String, label: String, initialValues: [String] = [], factory: any MetricsFactory) {
        self.name = name
        self.labels = (label, nil)
        self.factory = factory
        for value in initialValues { _ = counter(value, nil) }
    }

    /// Two labels; the counters of `initialValues` are made (at 0) at once.
    init(_ name: String, labels: (String, String), initialValues: [(String, String)] = [], factory: any MetricsFactory) {
        self.name = name
        self.labels = labels
        self.factory = factory
        for (value, second) in initialValues { _ = counter(value, second) }
    }

    func increment(_ value: String, _ second: String? = nil) {
        counter(value, second).increment()
    }

    /// The label values of one counter: compared as they are, with no string built per call.
    private struct Key: Hashable {
        var value: String
        var second: String?
    }

    private func counter(_ value: String, _ second: String?) -> Counter {
        let key = Key(value: value, second: second)
        return counters.withLock { counters in
            if let counter = counters[key] { return counter }
            var dimensions = [(labels.0, value)]
            if let label = labels.1, let second { dimensions.append((label, second)) }
            let counter = Counter(label: name, dimensions: dimensions, factory: factory)
            counters[key] = counter
            return counter
        }
    }
}
