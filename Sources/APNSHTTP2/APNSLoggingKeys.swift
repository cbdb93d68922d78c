/// Logger metadata keys used by the APNs transport.
enum APNSLoggingKeys {
    static let connectionID = "apns.connection.id"
    static let endpoint = "apns.endpoint"
    static let maxConcurrentStreams = "apns.max_concurrent_streams"
    static let goAwayErrorCode = "apns.goaway.error_code"
    static let goAwayReason = "apns.goaway.reason"
    static let credential = "apns.credential"
    static let credentialsKept = "apns.credentials.kept"
    static let credentialsAdded = "apns.credentials.added"
    static let credentialsRetired = "apns.credentials.retired"
    static let error = "error"
}
