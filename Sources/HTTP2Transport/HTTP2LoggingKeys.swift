/// Logger metadata keys the HTTP/2 transport writes.
package enum HTTP2LoggingKeys {
    package static let error = "error"
}
