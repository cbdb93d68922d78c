import Foundation
package import NIOSSL
package import PostgresNIO

/// `postgres://user:password@host:port/database`, split into what postgres-nio needs.
package struct PostgresURL: Sendable, CustomStringConvertible {
    package var host: String
    package var port: Int
    package var username: String
    package var password: String?
    package var database: String
    /// TLS as libpq's `sslmode` names it (`?sslmode=…`, default `prefer`).
    package var sslMode: SSLMode
    /// `?sslrootcert=path`: the PEM roots `verify-ca` and `verify-full` trust (default: the
    /// system's).
    package var sslRootCertificatePath: String?
    /// `?sslcert=path&sslkey=path`: the PEM client certificate (chain) and its unencrypted PEM
    /// key, for servers that authenticate clients by certificate (`hostssl ... cert`); read
    /// when the configuration is, so a file that cannot be used stops Herald at start-up.
    package var sslClientCertificate: (chain: [NIOSSLCertificate], key: NIOSSLPrivateKey)?
    /// Where ``sslClientCertificate``'s chain was read from (``CertificateWatch`` watches it).
    package var sslClientCertificatePath: String?

    /// The most connections a pool opens when HERALD_POSTGRES_POOL_SIZE is unset.
    package static let defaultPoolSize = 20

    /// libpq's TLS modes: `disable` (plaintext), `prefer` (TLS when the server offers it,
    /// unverified), `require` (TLS or no connection, unverified), `verify-ca` (TLS with a
    /// certificate from a trusted CA), `verify-full` (that, and the certificate names the host).
    package enum SSLMode: String, Sendable, CaseIterable {
        case disable
        case prefer
        case require
        case verifyCA = "verify-ca"
        case verifyFull = "verify-full"
    }

    package init(_ text: String) throws {
        guard let components = URLComponents(string: text),
            components.scheme == "postgres" || components.scheme == "postgresql",
            let host = components.host, !host.isEmpty
        else {
            throw ConfigurationError("HERALD_POSTGRES_URL must look like postgres://user:pass@host:port/db")
        }
        self.host = host
        self.port = components.port ?? 5432
        self.username = components.user ?? "postgres"
        self.password = components.password
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        self.database = path.isEmpty ? "herald" : path
        let query = Dictionary(components.queryItems?.map { ($0.name, $0.value ?? "") } ?? []) { _, last in last }
        guard let mode = SSLMode(rawValue: query["sslmode"] ?? "prefer") else {
            let modes = SSLMode.allCases.map(\.rawValue).joined(separator: ", ")
            throw ConfigurationError("HERALD_POSTGRES_URL: sslmode must be one of \(modes)")
        }
        sslMode = mode
        sslRootCertificatePath = query["sslrootcert"]
        if let path = sslRootCertificatePath, !FileManager.default.isReadableFile(atPath: path) {
            throw ConfigurationError("HERALD_POSTGRES_URL: cannot read sslrootcert=\(path)")
        }
        sslClientCertificatePath = query["sslcert"]
        switch (query["sslcert"], query["sslkey"]) {
        case (nil, nil):
            sslClientCertificate = nil
        case (let certificatePath?, let keyPath?):
            guard mode != .disable else { throw ConfigurationError("HERALD_POSTGRES_URL: sslcert and sslkey need TLS (sslmode=disable)") }
            do {
                sslClientCertificate = (try NIOSSLCertificate.fromPEMFile(certificatePath), try NIOSSLPrivateKey(file: keyPath, format: .pem))
            } catch {
                throw ConfigurationError("HERALD_POSTGRES_URL: cannot use sslcert=\(certificatePath) and sslkey=\(keyPath) (PEM, key unencrypted): \(error)")
            }
        default:
            throw ConfigurationError("HERALD_POSTGRES_URL: sslcert and sslkey go together")
        }
    }

    /// postgres-nio's TLS setting for ``sslMode``, for the pool.
    var tls: PostgresClient.Configuration.TLS {
        guard let (configuration, isRequired) = tlsSettings else { return .disable }
        return isRequired ? .require(configuration) : .prefer(configuration)
    }

    /// The same, for one connection.
    func connectionTLS() throws -> PostgresConnection.Configuration.TLS {
        guard let (configuration, isRequired) = tlsSettings else { return .disable }
        let context = try NIOSSLContext(configuration: configuration)
        return isRequired ? .require(context) : .prefer(context)
    }

    /// The TLS configuration ``sslMode`` asks for, and whether a connection without TLS is
    /// refused; nil for `disable`.
    private var tlsSettings: (configuration: TLSConfiguration, isRequired: Bool)? {
        var configuration = TLSConfiguration.makeClientConfiguration()
        // A connection closed because it died while idle never answers the close_notify: its
        // pool slot comes back after this wait (NIOSSL's default is 5 s).
        configuration.shutdownTimeout = .milliseconds(250)
        if let sslRootCertificatePath { configuration.trustRoots = .file(sslRootCertificatePath) }
        if let (chain, key) = sslClientCertificate {
            configuration.certificateChain = chain.map { .certificate($0) }
            configuration.privateKey = .privateKey(key)
        }
        switch sslMode {
        case .disable:
            return nil
        case .prefer, .require:
            configuration.certificateVerification = .none
            return (configuration, sslMode == .require)
        case .verifyCA:
            configuration.certificateVerification = .noHostnameVerification
            return (configuration, true)
        case .verifyFull:
            configuration.certificateVerification = .fullVerification
            return (configuration, true)
        }
    }

    /// The URL without its password, for logs.
    package var description: String { "postgres://\(username)@\(host):\(port)/\(database)" }

    /// One connection's configuration, for a check before a pool is made.
    package func connectionConfiguration() throws -> PostgresConnection.Configuration {
        PostgresConnection.Configuration(host: host, port: port, username: username, password: password, database: database, tls: try connectionTLS())
    }

    /// The postgres-nio client configuration for this URL, with a pool of `maximumConnections`.
    /// - Parameters:
    ///   - maximumConnections: the pool's size.
    ///   - pipeline: for the pipeline's pool, whose statements are all equality lookups and
    ///     batched writes, running all the time:
    ///     - Its sessions plan generically (`plan_cache_mode = force_generic_plan`) and never
    ///       choose a sequential scan where an index serves (`enable_seqscan = off`). Statistics
    ///       gathered while a table was nearly empty, then a bulk load of tokens before the next
    ///       auto-analyze, made even the generic token lookup a sequential scan, far slower than
    ///       with `enable_seqscan = off` (psql, EXPLAIN ANALYZE; BENCHMARKS.md, "What each change
    ///       bought"). So the pipeline's statements run prepared, each planned once per
    ///       connection: a plan made while a table was nearly empty still probes its index, and
    ///       the ledger's statements are not planned over every day partition at each execution
    ///       (unnamed, planning the ledger lookup cost more than executing it; EXPLAIN ANALYZE,
    ///       BENCHMARKS.md, "What each change bought").
    ///     - Up to 4 connections (a poll batch's lookup and its ledger write, another batch's
    ///       lookup, a token update) stay open, with no idle time-out, and no connection runs
    ///       postgres-nio's keep-alive query. The pool starts both timers, each a task and a
    ///       dispatch timer, whenever a connection goes back idle, and cancels them at its next
    ///       lease: at every statement. Without them a poll batch at a steady load costs less CPU,
    ///       fewer context switches and fewer system calls (BENCHMARKS.md, "What each change
    ///       bought"). A connection that died while idle is found by the store's
    ///       `IdleConnectionCheck` (PostgresStores) before a statement waits on it.
    package func clientConfiguration(maximumConnections: Int = PostgresURL.defaultPoolSize, pipeline: Bool = false) -> PostgresClient.Configuration {
        var configuration = PostgresClient.Configuration(
            host: host,
            port: port,
            username: username,
            password: password,
            database: database,
            tls: tls
        )
        configuration.options.maximumConnections = maximumConnections
        if pipeline {
            configuration.options.minimumConnections = min(maximumConnections, 4)
            configuration.options.keepAliveBehavior = nil
            configuration.options.additionalStartupParameters = [("plan_cache_mode", "force_generic_plan"), ("enable_seqscan", "off")]
        }
        return configuration
    }
}
