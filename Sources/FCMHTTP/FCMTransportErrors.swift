import APNSCore
import FCMCore

/// Reads the HTTP/2 transport's errors as ``FCMTransportError``s (none carries a secret).
enum FCMTransportErrors {
    /// `error` from a request; `deadlinePassed` says whether its deadline had passed when it failed.
    static func map(_ error: any Error, deadlinePassed: Bool) -> FCMTransportError {
        if let error = error as? FCMTransportError { return error }
        if let error = error as? APNSTransportError {
            if error.isShuttingDown { return .shuttingDown(error.detail) }
            if error.isStreamReset { return .streamReset(error.detail) }
            if error.isConnectionFailure {
                return error.resultReason == "TLSHandshakeFailed" ? .tlsHandshakeFailed(error.detail) : .connectionFailed(error.detail)
            }
            // A deadline, or too many requests waiting for a stream: both are "Timeout" results.
            return .deadlineExceeded(error.detail)
        }
        if deadlinePassed { return .deadlineExceeded("\(type(of: error))") }
        return .connectionFailed("\(error)")
    }
}
