public import WebPushCore
import APNSCore
public import PushCore
import PushStores

/// The topic names Herald reads and writes (HERALD_TOPIC_*).
public struct PushTopics: Sendable, Hashable {
    public var requests = "push.requests"
    /// The bulk lane: the same events, for sends that may wait (campaigns, digests); push.requests
    /// takes precedence over it.
    public var bulkRequests = "push.requests.bulk"
    public var tokens = "push.tokens"
    public var results = "push.results"
    public var unregistered = "push.unregistered"
    public var deadLetters = "push.dlq"
    /// Channel management commands (create, read, delete, list broadcast channels).
    public var channels = "push.channels"
    /// One answer per channel management command, keyed by its request id.
    public var channelResults = "push.channel-results"

    public init() {}
}

/// Settings of the notification pipeline.
public struct PipelineConfiguration: Sendable, Hashable {
    public var topics = PushTopics()
    public var retry = RetryPolicy()
    /// Messages being processed at once, across partitions (HERALD_MAX_IN_FLIGHT_MESSAGES);
    /// polling waits when it is reached.
    public var maxInFlightMessages = 4096
    /// Results being produced at once, over all events (HERALD_MAX_CONCURRENT_SENDS): each
    /// holds a permit from before its APNs request until its result is published, so this
    /// bounds the requests in flight and what a crash can push twice.
    public var maxConcurrentSends = 2000
    /// The share of ``maxConcurrentSends`` bulk sends may hold at once (at least one permit):
    /// the rest stay free for urgent ones (BulkLaneTests, herald-bench --campaign-urgent-rate).
    public var bulkSendShare = 0.75
    /// Most outcomes one delivery-ledger write records (HERALD_LEDGER_BATCH_SIZE); outcomes
    /// that arrive while a write is in flight are written together in the next.
    public var maxOutcomesPerLedgerWrite = 500
    /// How long the ledger keeps outcomes, counted from their record's timestamp
    /// (HERALD_LEDGER_RETENTION_HOURS); a lookup for an older record is counted in
    /// `herald_ledger_lookups_beyond_retention_total`, since its outcomes may be gone.
    public var ledgerRetention: Duration = LedgerEvent.defaultRetention
    /// Largest number of messages taken from one poll (HERALD_POLL_BATCH_SIZE); the events of
    /// one poll share one token lookup per app and one ledger lookup.
    public var pollBatchSize = 256
    /// How long a full window is waited on before the partitions are paused.
    public var windowFullPatience: Duration = .seconds(1)
    /// How often finished offsets are committed.
    public var commitInterval: Duration = .milliseconds(250)
    /// How long a rebalance waits for the revoked partitions' in-flight messages before letting
    /// them go (unfinished ones are redelivered to the new owner, whose ledger lookup then finds
    /// any outcome they recorded).
    public var revocationDrainTimeout: Duration = .seconds(15)
    /// The longest one token-store or ledger call may take before it is cancelled and retried:
    /// a query waiting for a connection that a restarted PostgreSQL never gives back must not
    /// stall its partition for good.
    public var storeOperationTimeout: Duration = .seconds(10)
    /// The most timed-out token-store or ledger calls left running at once (each may hold a
    /// PostgreSQL connection until its query ends); past it, new attempts wait for one to end
    /// instead of piling up more.
    public var maxAbandonedStoreOperations = 32
    /// The wait between attempts of a token-store or ledger call that failed (PostgreSQL
    /// unavailable, or the call timed out); it is retried until it succeeds.
    public var storeRetry = Backoff(initial: .milliseconds(50), maximum: .seconds(5))
    /// The wait between attempts of a token-store or ledger call that PostgreSQL refused with a
    /// permanent error (missing table, revoked grant): slow, until an operator fixes the cause.
    public var storePermanentRetry = Backoff(initial: .seconds(1), maximum: .seconds(30))
    /// The wait between attempts to publish a record the broker refused with a retriable error
    /// (time-out, transport, leader change).
    public var publishRetry = Backoff(initial: .milliseconds(50), maximum: .seconds(5))
    /// The wait between attempts to publish a record refused with a permanent error (unknown
    /// topic, denied ACL, record too large): slow, until an operator fixes the cause.
    public var blockedPublishRetry = Backoff(initial: .seconds(1), maximum: .seconds(30))
    /// Sends an event without `collapse_id` with one derived from its id
    /// (HERALD_APNS_DERIVED_COLLAPSE_ID), so a crash's repeat of an alert replaces the first copy.
    public var derivesCollapseID = false
    /// Notifications per second this instance sends from the bulk lane (HERALD_BULK_MAX_RATE),
    /// paced evenly; 0: no cap.
    public var bulkMaxRate = 0
    /// The push-service hosts a browser subscription's endpoint may name
    /// (HERALD_WEBPUSH_ALLOWED_HOSTS): any other is refused at registration and at sending.
    public var webPushHosts = WebPushHostAllowList.standard

    public init() {}
}
