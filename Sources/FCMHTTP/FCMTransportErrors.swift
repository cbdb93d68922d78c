import AsyncHTTPClient
import FCMCore
import NIOCore
import NIOHTTP2
import NIOSSL

/// Reads AsyncHTTPClient's and NIO's errors as ``FCMTransportError``s (none carries a secret).
enum FCMTransportErrors {
    /// `error` from a request; `deadlinePassed` says whether its deadline had passed when it failed.
    static func map(_ error: any Error, deadlinePassed: Bool) -> FCMTransportError {
        if let error = error as? FCMTransportError { return error }
        if let error = error as? HTTPClientError {
            switch error {
            case .deadlineExceeded, .readTimeout, .writeTimeout: return .deadlineExceeded("\(error)")
            case .tlsHandshakeTimeout: return .tlsHandshakeFailed("\(error)")
            case .alreadyShutdown: return .shuttingDown("\(error)")
            case .cancelled where deadlinePassed: return .deadlineExceeded("\(error)")
            default: return .connectionFailed("\(error)")
            }
        }
        if error is NIOSSLError || error is BoringSSLError { return .tlsHandshakeFailed("\(type(of: error))") }
        if error is any NIOHTTP2Error { return .streamReset("\(error)") }
        if deadlinePassed { return .deadlineExceeded("\(type(of: error))") }
        return .connectionFailed("\(error)")
    }
}
