/// The metadata keys of the pipeline's log lines, in one place so dashboards and log queries
/// can rely on them. Values never hold a whole device token (``DeviceTokenText/redacted(_:)``),
/// a key or a provider token.
enum PipelineLoggingKeys {
    static let eventID = "push.event_id"
    static let token = "push.token"
    static let status = "push.status"
    static let action = "push.action"
    static let applied = "push.applied"
    static let apnsReason = "apns.reason"
    static let topic = "kafka.topic"
    static let partition = "kafka.partition"
    static let offset = "kafka.offset"
    static let kafkaError = "kafka.error"
    static let unfinished = "kafka.unfinished"
    static let rejection = "herald.error"
    static let rejectionDetail = "herald.error_detail"
    static let error = "error"
    static let attempt = "attempt"
    static let sqlState = "postgres.sqlstate"
}
