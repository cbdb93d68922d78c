/// What `/health/ready` decides: Herald can do its job now.
enum Readiness {
    /// Ready when the consume loop polls, the consumer has joined its group, no permanent broker
    /// error holds a publish, PostgreSQL answers and every APNs endpoint can be reached. The
    /// cheap conditions are read first; the probes run only when those hold.
    static func check(
        consuming: Bool,
        joinedGroup: Bool,
        publishBlockedBy: [String],
        database: () async -> Bool,
        apns: () async -> Bool
    ) async -> Bool {
        guard consuming, joinedGroup, publishBlockedBy.isEmpty else { return false }
        guard await database() else { return false }
        return await apns()
    }
}
