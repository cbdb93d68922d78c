import HTTP2Transport
/// Logger metadata keys used by the APNs connection handler and the client.
package enum APNSLoggingKeys {
    package static let connectionID = "apns.connection.id"
    package static let endpoint = "apns.endpoint"
    package static let maxConcurrentStreams = "apns.max_concurrent_streams"
    package static let goAwayErrorCode = "apns.goaway.error_code"
    package static let goAwayReason = "apns.goaway.reason"
    package static let credential = "apns.credential"
    package static let credentialsKept = "apns.credentials.kept"
    package static let credentialsAdded = "apns.credentials.added"
    package static let credentialsRetired = "apns.credentials.retired"
    package static let error = "error"
}
