import PushPipeline

extension PipelineConfiguration {
    /// The keys the pipeline's configuration is read from.
    static let keys = [
        "HERALD_TOPIC_REQUESTS", "HERALD_TOPIC_BULK_REQUESTS", "HERALD_TOPIC_TOKENS", "HERALD_TOPIC_RESULTS",
        "HERALD_TOPIC_UNREGISTERED", "HERALD_TOPIC_DLQ", "HERALD_TOPIC_CHANNELS", "HERALD_TOPIC_CHANNEL_RESULTS",
        "HERALD_RETRY_MAX_ATTEMPTS", "HERALD_DELIVERY_DEADLINE_S", "HERALD_MAX_CONCURRENT_SENDS",
        "HERALD_MAX_IN_FLIGHT_MESSAGES", "HERALD_POLL_BATCH_SIZE", "HERALD_LEDGER_BATCH_SIZE",
        "HERALD_APNS_DERIVED_COLLAPSE_ID", "HERALD_BULK_MAX_RATE",
    ]

    /// The pipeline's topics, retry budget, windows, batch bounds and bulk pace, with the
    /// ledger's retention (housekeeping's setting, which tells the pipeline which records the
    /// ledger can still answer for).
    init(reading source: HeraldConfigurationSource, ledgerRetention: Duration) throws {
        self.init()
        topics.requests = source.string("HERALD_TOPIC_REQUESTS", default: topics.requests)
        topics.bulkRequests = source.string("HERALD_TOPIC_BULK_REQUESTS", default: topics.bulkRequests)
        topics.tokens = source.string("HERALD_TOPIC_TOKENS", default: topics.tokens)
        topics.results = source.string("HERALD_TOPIC_RESULTS", default: topics.results)
        topics.unregistered = source.string("HERALD_TOPIC_UNREGISTERED", default: topics.unregistered)
        topics.deadLetters = source.string("HERALD_TOPIC_DLQ", default: topics.deadLetters)
        topics.channels = source.string("HERALD_TOPIC_CHANNELS", default: topics.channels)
        topics.channelResults = source.string("HERALD_TOPIC_CHANNEL_RESULTS", default: topics.channelResults)
        retry = RetryPolicy(
            maxAttempts: try source.integer("HERALD_RETRY_MAX_ATTEMPTS", default: 12, in: 1...1000),
            deliveryDeadline: .seconds(try source.integer("HERALD_DELIVERY_DEADLINE_S", default: 300, in: 1...86_400))
        )
        maxConcurrentSends = try source.integer("HERALD_MAX_CONCURRENT_SENDS", default: maxConcurrentSends, in: 1...100_000)
        maxInFlightMessages = try source.integer("HERALD_MAX_IN_FLIGHT_MESSAGES", default: maxInFlightMessages, in: 1...1_000_000)
        pollBatchSize = try source.integer("HERALD_POLL_BATCH_SIZE", default: pollBatchSize, in: 1...100_000)
        maxOutcomesPerLedgerWrite = try source.integer("HERALD_LEDGER_BATCH_SIZE", default: maxOutcomesPerLedgerWrite, in: 1...10_000)
        derivesCollapseID = try source.boolean("HERALD_APNS_DERIVED_COLLAPSE_ID", default: false)
        bulkMaxRate = try source.integer("HERALD_BULK_MAX_RATE", default: 0, in: 0...1_000_000)
        self.ledgerRetention = ledgerRetention
    }
}
