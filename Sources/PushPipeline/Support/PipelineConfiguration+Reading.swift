public import ConfigReading
public import Configuration
import WebPushCore

extension PipelineConfiguration {
    /// The keys read, relative to the reader given to ``init(reading:ledgerRetention:)``: under
    /// Herald's reader, scoped to `herald`, `retry.max_attempts` is HERALD_RETRY_MAX_ATTEMPTS.
    /// None of their values is secret.
    public static let configKeys: [ConfigKey] = [
        ["topic", "requests"], ["topic", "bulk_requests"], ["topic", "tokens"], ["topic", "results"],
        ["topic", "unregistered"], ["topic", "dlq"], ["topic", "channels"], ["topic", "channel_results"],
        ["retry", "max_attempts"], ["delivery", "deadline_s"], ["max_concurrent_sends"], ["max_in_flight_messages"],
        ["poll_batch_size"], ["ledger", "batch_size"], ["apns", "derived_collapse_id"], ["bulk", "max_rate"],
        ["webpush", "allowed_hosts"],
    ]

    /// Reads the pipeline's topics, retry budget, windows, batch bounds and bulk pace from
    /// `config`; a key left unset keeps the default its property (or ``RetryPolicy``'s) states.
    /// `ledgerRetention` is housekeeping's setting, which tells the pipeline which records the
    /// ledger can still answer for. Throws naming the key when a value is not usable.
    public init(reading config: ConfigReader, ledgerRetention: Duration) throws(ConfigurationValueError) {
        self.init()
        topics.requests = config.string(forKey: ["topic", "requests"], default: topics.requests)
        topics.bulkRequests = config.string(forKey: ["topic", "bulk_requests"], default: topics.bulkRequests)
        topics.tokens = config.string(forKey: ["topic", "tokens"], default: topics.tokens)
        topics.results = config.string(forKey: ["topic", "results"], default: topics.results)
        topics.unregistered = config.string(forKey: ["topic", "unregistered"], default: topics.unregistered)
        topics.deadLetters = config.string(forKey: ["topic", "dlq"], default: topics.deadLetters)
        topics.channels = config.string(forKey: ["topic", "channels"], default: topics.channels)
        topics.channelResults = config.string(forKey: ["topic", "channel_results"], default: topics.channelResults)
        retry.maxAttempts = try config.int(forKey: ["retry", "max_attempts"], default: retry.maxAttempts, in: 1...1000)
        retry.deliveryDeadline = try config.duration(
            forKey: ["delivery", "deadline_s"],
            unit: .seconds(1),
            default: retry.deliveryDeadline,
            in: 1...86_400
        )
        maxConcurrentSends = try config.int(forKey: ["max_concurrent_sends"], default: maxConcurrentSends, in: 1...100_000)
        maxInFlightMessages = try config.int(forKey: ["max_in_flight_messages"], default: maxInFlightMessages, in: 1...1_000_000)
        pollBatchSize = try config.int(forKey: ["poll_batch_size"], default: pollBatchSize, in: 1...100_000)
        maxOutcomesPerLedgerWrite = try config.int(forKey: ["ledger", "batch_size"], default: maxOutcomesPerLedgerWrite, in: 1...10_000)
        derivesCollapseID = try config.flag(forKey: ["apns", "derived_collapse_id"], default: derivesCollapseID)
        bulkMaxRate = try config.int(forKey: ["bulk", "max_rate"], default: bulkMaxRate, in: 0...1_000_000)
        if let hosts = config.string(forKey: ["webpush", "allowed_hosts"]) {
            guard let allowList = WebPushHostAllowList(parsing: hosts) else {
                throw ConfigurationValueError(
                    "\(ConfigKey(["webpush", "allowed_hosts"]).environmentName) must be comma-separated host names, each optionally *.-prefixed")
            }
            webPushHosts = allowList
        }
        self.ledgerRetention = ledgerRetention
    }
}
