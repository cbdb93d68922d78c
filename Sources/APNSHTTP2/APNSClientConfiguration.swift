public import APNSCore
package import HTTP2Transport
import NIOCore

/// How ``APNSHTTP2Client`` reaches APNs: endpoints, credentials, trust and connection tuning.
public struct APNSClientConfiguration: Sendable {
    /// An APNs host and port, parsed from `https://host[:port]`.
    public struct Endpoint: Sendable, Hashable, CustomStringConvertible {
        /// The host name or IP literal (IPv6 without brackets).
        public var host: String
        /// The TCP port (443 unless the URL names one; APNs also listens on 2197).
        public var port: Int

        /// Apple's production endpoint, `https://api.push.apple.com`.
        public static let production = Endpoint(host: "api.push.apple.com", port: 443)
        /// Apple's sandbox (development) endpoint, `https://api.sandbox.push.apple.com`.
        public static let sandbox = Endpoint(host: "api.sandbox.push.apple.com", port: 443)
        /// Apple's channel management API for production apps.
        public static let channelManagementProduction = Endpoint(host: "api-manage-broadcast.push.apple.com", port: 2196)
        /// Apple's channel management API for development (sandbox) apps.
        public static let channelManagementSandbox = Endpoint(host: "api-manage-broadcast.sandbox.push.apple.com", port: 2195)

        /// An endpoint from its parts; `host` is a name or an IP literal (IPv6 without brackets).
        public init(host: String, port: Int = 443) {
            self.host = host
            self.port = port
        }

        /// Parses `https://host[:port]` (an IPv4 literal or a bracketed IPv6 literal is allowed, as is
        /// one trailing `/`). Throws ``APNSClientConfigurationError`` for any other scheme, a path,
        /// credentials, a query or a bad port.
        public init(url: String) throws {
            self = try EndpointURLParser.parse(url)
        }

        /// True when `host` is an IPv4 or IPv6 literal (no SNI is sent then; the certificate must
        /// name the address).
        public var isIPAddress: Bool { serverAddress.isIPAddress }

        /// The `:authority` value: the host, bracketed when IPv6, plus the port when not 443.
        public var authority: String { serverAddress.authority }

        /// The same host and port as the transport takes them.
        package var serverAddress: HTTP2ServerAddress { HTTP2ServerAddress(host: host, port: port) }

        public var description: String { "https://\(authority)" }
    }

    /// How the client proves who it is to APNs.
    public struct Authentication: Sendable, CustomStringConvertible {
        enum Backing: Sendable {
            case token(ProviderTokenCredentials)
            case pkcs12(path: String, password: String?)
            case pem(certificatePath: String, privateKeyPath: String)
        }
        let backing: Backing

        /// Token (JWT, ES256) authentication: each connection signs its own provider token and
        /// refreshes it between 20 and 60 minutes after issuing it.
        public static func token(_ credentials: ProviderTokenCredentials) -> Self {
            Self(backing: .token(credentials))
        }

        /// Certificate authentication with a PKCS#12 bundle (`.p12`) holding the certificate and its key.
        public static func certificate(pkcs12Path: String, password: String?) -> Self {
            Self(backing: .pkcs12(path: pkcs12Path, password: password))
        }

        /// Certificate authentication with a PEM certificate (chain) file and a PEM private key file.
        public static func certificate(pemCertificatePath: String, pemPrivateKeyPath: String) -> Self {
            Self(backing: .pem(certificatePath: pemCertificatePath, privateKeyPath: pemPrivateKeyPath))
        }

        /// True for token authentication, where Apple allows one stream per connection until a
        /// request with the token succeeded.
        public var usesProviderTokens: Bool {
            if case .token = backing { return true }
            return false
        }

        /// The client certificate's file, for certificate authentication: its path, whether it
        /// is a PKCS#12 bundle (else PEM), and the bundle's password.
        package var certificateFile: (path: String, isPKCS12: Bool, password: String?)? {
            switch backing {
            case .token: nil
            case .pkcs12(let path, let password): (path, true, password)
            case .pem(let certificatePath, _): (certificatePath, false, nil)
            }
        }

        /// Names the method only; never key material, paths' secrets or passwords.
        public var description: String {
            switch backing {
            case .token(let credentials): "token(keyID: \(credentials.keyID), teamID: \(credentials.teamID))"
            case .pkcs12: "certificate(pkcs12)"
            case .pem: "certificate(pem)"
            }
        }
    }

    /// The production endpoint; default `https://api.push.apple.com`.
    public var production: Endpoint
    /// The sandbox endpoint; default `https://api.sandbox.push.apple.com`.
    public var sandbox: Endpoint
    /// The default credentials: used for every topic without an entry in ``credentialsByTopic``.
    /// When nil, only the topics listed there are served; a request for any other topic throws
    /// ``APNSNoCredentialError`` without being sent.
    public var authentication: Authentication?
    /// Credentials for particular apps (several apps or teams in one Herald), keyed by bundle ID:
    /// the `apns-topic` without Apple's push-type suffix (`com.example.app` also covers
    /// `com.example.app.voip`). A full suffixed topic may be given too and wins over its bundle ID.
    /// Each distinct credential gets its own connections; empty by default.
    public var credentialsByTopic: [String: Authentication]
    /// A PEM file of extra trusted CA certificates (for a mock APNs); the system roots stay trusted.
    public var additionalTrustRootsPEMPath: String?
    /// HTTP/2 connections kept per endpoint; default 2.
    public var connectionsPerEndpoint: Int
    /// The longest a TCP connect plus TLS and HTTP/2 handshake may take; default 10 s.
    public var connectTimeout: Duration
    /// A connection that received nothing for this long sends a PING; default 60 s.
    public var pingInterval: Duration
    /// A PING not acknowledged within this time closes the connection; default 20 s.
    public var pingTimeout: Duration
    /// Callers waiting for a free stream beyond this many get ``TransportError/overloaded(_:)``;
    /// default 10,000.
    public var maximumQueuedRequests: Int
    /// On graceful shutdown, in-flight requests get this long to finish before connections close;
    /// default 5 s.
    public var shutdownGracePeriod: Duration

    /// A configuration with Apple's endpoints and the documented defaults; only the credentials are required.
    public init(
        authentication: Authentication?,
        production: Endpoint = .production,
        sandbox: Endpoint = .sandbox,
        additionalTrustRootsPEMPath: String? = nil,
        connectionsPerEndpoint: Int = 2,
        connectTimeout: Duration = .seconds(10),
        pingInterval: Duration = .seconds(60),
        pingTimeout: Duration = .seconds(20),
        maximumQueuedRequests: Int = 10_000,
        shutdownGracePeriod: Duration = .seconds(5),
        credentialsByTopic: [String: Authentication] = [:]
    ) {
        self.authentication = authentication
        self.credentialsByTopic = credentialsByTopic
        self.production = production
        self.sandbox = sandbox
        self.additionalTrustRootsPEMPath = additionalTrustRootsPEMPath
        self.connectionsPerEndpoint = connectionsPerEndpoint
        self.connectTimeout = connectTimeout
        self.pingInterval = pingInterval
        self.pingTimeout = pingTimeout
        self.maximumQueuedRequests = maximumQueuedRequests
        self.shutdownGracePeriod = shutdownGracePeriod
    }

    /// The endpoint requests for `environment` go to.
    public func endpoint(for environment: APNSEnvironment) -> Endpoint {
        switch environment {
        case .production: production
        case .sandbox: sandbox
        }
    }
}

/// A configuration value ``APNSHTTP2Client`` cannot use. The message names the problem, never a secret.
public struct APNSClientConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong, for logs and operators.
    public let message: String

    init(_ message: String) {
        self.message = message
    }

    public var description: String { message }
}

/// Parses `https://host[:port][/]`.
enum EndpointURLParser {
    static func parse(_ url: String) throws -> APNSClientConfiguration.Endpoint {
        let prefix = "https://"
        guard url.count > prefix.count, url.prefix(prefix.count).lowercased() == prefix else {
            throw APNSClientConfigurationError("APNs URL \"\(url)\" must start with https://")
        }
        var rest = Substring(url.dropFirst(prefix.count))
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        if rest.contains(where: { "/?#@ ".contains($0) }) {
            throw APNSClientConfigurationError(
                "APNs URL \"\(url)\" must be https://host[:port] without path, query or credentials"
            )
        }

        let host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            // A bracketed IPv6 literal: [addr] or [addr]:port.
            guard let close = rest.firstIndex(of: "]") else {
                throw APNSClientConfigurationError("APNs URL \"\(url)\" has an unterminated IPv6 literal")
            }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else {
                    throw APNSClientConfigurationError("APNs URL \"\(url)\" has text after the IPv6 literal")
                }
                portText = after.dropFirst()
            }
            guard (try? SocketAddress(ipAddress: String(host), port: 0)) != nil, host.contains(":") else {
                throw APNSClientConfigurationError("APNs URL \"\(url)\" has an invalid IPv6 literal")
            }
        } else {
            let parts = rest.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count <= 2 else {
                throw APNSClientConfigurationError(
                    "APNs URL \"\(url)\" has too many colons (bracket IPv6 literals: https://[::1]:2197)"
                )
            }
            host = parts[0]
            if parts.count == 2 { portText = parts[1] }
            let allowed = host.unicodeScalars.allSatisfy { scalar in
                scalar.isASCII
                    && (("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar)
                        || ("0"..."9").contains(scalar) || scalar == "-" || scalar == ".")
            }
            guard allowed else {
                throw APNSClientConfigurationError("APNs URL \"\(url)\" has an invalid host name")
            }
        }
        guard !host.isEmpty else {
            throw APNSClientConfigurationError("APNs URL \"\(url)\" has no host")
        }

        var port = 443
        if let portText {
            guard !portText.isEmpty, portText.count <= 5, portText.allSatisfy({ ("0"..."9").contains($0) }),
                let value = Int(portText), (1...65535).contains(value)
            else {
                throw APNSClientConfigurationError("APNs URL \"\(url)\" has an invalid port")
            }
            port = value
        }
        return APNSClientConfiguration.Endpoint(host: String(host), port: port)
    }
}
