/// What `/health/ready` decides: whether Herald can do its job now, and if not, why.
enum Readiness {
    /// The conditions that do not hold; empty when Herald is ready.
    ///
    /// Ready means: no graceful shutdown began, the consume loop polls, the consumer has joined
    /// its group, no permanent error holds a publish or a statement, PostgreSQL answers (the one
    /// probe, bounded), no APNs endpoint is known to be unreachable, and, when FCM is configured,
    /// some Firebase project has an access token (`fcm_token_unavailable` when none has: one
    /// project's failing credential is an alert, not a reason to stall every rollout).
    static func unmetConditions(
        draining: Bool,
        consuming: Bool,
        joinedGroup: Bool,
        publishBlockedBy: [String],
        storeBlockedBy: [String],
        apnsReachable: Bool,
        fcmTokenAvailable: Bool = true,
        database: @Sendable () async -> Bool
    ) async -> [String] {
        async let databaseAnswers = database()
        var unmet: [String] = []
        // SIGTERM: a rollout takes this instance out of service at once.
        if draining { unmet.append("shutting_down") }
        if !consuming { unmet.append("kafka_poll_failing") }
        if !joinedGroup { unmet.append("kafka_group_not_joined") }
        unmet += publishBlockedBy.map { "kafka_publish_blocked:\($0)" }
        unmet += storeBlockedBy.map { "postgres_failing:\($0)" }
        if await !databaseAnswers { unmet.append("postgres_unreachable") }
        if !apnsReachable { unmet.append("apns_unreachable") }
        if !fcmTokenAvailable { unmet.append("fcm_token_unavailable") }
        return unmet
    }
}
