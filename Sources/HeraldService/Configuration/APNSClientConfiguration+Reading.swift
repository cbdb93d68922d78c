import APNSHTTP2
import Foundation

extension APNSClientConfiguration {
    /// The keys the APNs clients' configuration is read from: the default credential, the
    /// credentials file, the hosts (devices, broadcasts, channel management), the CA and the
    /// connections per host.
    static let keys = [
        "HERALD_APNS_KEY_PATH", "HERALD_APNS_KEY_ID", "HERALD_APNS_TEAM_ID",
        "HERALD_APNS_CERT_PATH", "HERALD_APNS_CERT_PASSWORD", "HERALD_APNS_CERT_KEY_PATH",
        "HERALD_APNS_CREDENTIALS_FILE", "HERALD_APNS_CREDENTIALS_CHECK_S",
        "HERALD_APNS_PRODUCTION_URL", "HERALD_APNS_SANDBOX_URL", "HERALD_APNS_CA_PATH", "HERALD_APNS_CONNECTIONS",
        "HERALD_APNS_BROADCAST_PRODUCTION_URL", "HERALD_APNS_BROADCAST_SANDBOX_URL",
        "HERALD_APNS_CHANNELS_PRODUCTION_URL", "HERALD_APNS_CHANNELS_SANDBOX_URL",
    ]

    /// Everything read from those keys.
    struct Settings {
        /// nil when no APNs credential is configured (only `herald migrate` can run then).
        var client: APNSClientConfiguration?
        /// Certificates that expired, expire within 30 days, or were not issued for a bundle ID
        /// they are configured for.
        var certificateProblems: [String] = []
        /// Where broadcasts go; nil: to the device hosts.
        var broadcastEndpoints: (production: Endpoint, sandbox: Endpoint)?
        var channelManagementEndpoints: (production: Endpoint, sandbox: Endpoint)
        var credentialsFile: String?
        var credentialsCheckInterval: Duration

        init(reading source: HeraldConfigurationSource) throws {
            var certificateProblems: [String] = []
            client = try APNSClientConfiguration.client(source, certificateProblems: &certificateProblems)
            self.certificateProblems = certificateProblems
            let broadcastProduction = try APNSClientConfiguration.endpoint(source, "HERALD_APNS_BROADCAST_PRODUCTION_URL")
            let broadcastSandbox = try APNSClientConfiguration.endpoint(source, "HERALD_APNS_BROADCAST_SANDBOX_URL")
            if broadcastProduction != nil || broadcastSandbox != nil {
                broadcastEndpoints = (
                    broadcastProduction ?? client?.production ?? .production,
                    broadcastSandbox ?? client?.sandbox ?? .sandbox
                )
            }
            channelManagementEndpoints = (
                try APNSClientConfiguration.endpoint(source, "HERALD_APNS_CHANNELS_PRODUCTION_URL") ?? .channelManagementProduction,
                try APNSClientConfiguration.endpoint(source, "HERALD_APNS_CHANNELS_SANDBOX_URL") ?? .channelManagementSandbox
            )
            credentialsFile = source["HERALD_APNS_CREDENTIALS_FILE"]
            credentialsCheckInterval = .seconds(try source.integer("HERALD_APNS_CREDENTIALS_CHECK_S", default: 10, in: 1...86_400))
        }
    }

    /// The APNs client's configuration: the HERALD_APNS_KEY_*/CERT_* credential for every topic,
    /// and the credentials of HERALD_APNS_CREDENTIALS_FILE for the apps it lists. Without the
    /// former, the file's credentials are all there is (events for any other topic are
    /// rejected). nil when no credential is configured at all.
    private static func client(
        _ source: HeraldConfigurationSource,
        certificateProblems: inout [String]
    ) throws -> APNSClientConfiguration? {
        var fileCredentials: [String: Authentication] = [:]
        if let path = source["HERALD_APNS_CREDENTIALS_FILE"] {
            (fileCredentials, certificateProblems) = try APNSCredentialsFile.loadReportingCertificates(path: path)
        }
        if let certificatePath = source["HERALD_APNS_CERT_PATH"], source["HERALD_APNS_KEY_PATH"] == nil {
            certificateProblems += APNSCredentialsFile.certificateProblemsOf(
                path: certificatePath,
                password: source["HERALD_APNS_CERT_PASSWORD"],
                name: "HERALD_APNS_CERT_PATH=\(certificatePath)",
                servedTopics: []
            )
        }
        let defaultAuthentication = try defaultCredential(source)
        guard defaultAuthentication != nil || !fileCredentials.isEmpty else { return nil }
        var configuration = APNSClientConfiguration(authentication: defaultAuthentication)
        configuration.credentialsByTopic = fileCredentials
        do {
            if let url = source["HERALD_APNS_PRODUCTION_URL"] {
                configuration.production = try .init(url: url)
            }
            if let url = source["HERALD_APNS_SANDBOX_URL"] {
                configuration.sandbox = try .init(url: url)
            }
        } catch {
            throw ConfigurationError("\(error)")
        }
        if let caPath = source["HERALD_APNS_CA_PATH"] {
            guard FileManager.default.isReadableFile(atPath: caPath) else {
                throw ConfigurationError("cannot read HERALD_APNS_CA_PATH=\(caPath)")
            }
            configuration.additionalTrustRootsPEMPath = caPath
        }
        if source["HERALD_APNS_CONNECTIONS"] != nil {
            configuration.connectionsPerEndpoint = try source.integer("HERALD_APNS_CONNECTIONS", default: 2, in: 1...64)
        }
        return configuration
    }

    /// The endpoint a `https://host[:port]` value of `key` names, if set.
    private static func endpoint(
        _ source: HeraldConfigurationSource,
        _ key: String
    ) throws -> Endpoint? {
        guard let url = source[key] else { return nil }
        do {
            return try .init(url: url)
        } catch {
            throw ConfigurationError("\(key): \(error)")
        }
    }

    /// The HERALD_APNS_KEY_* (token) or HERALD_APNS_CERT_* (certificate: PKCS#12 with
    /// HERALD_APNS_CERT_PASSWORD, or PEM with its key in HERALD_APNS_CERT_KEY_PATH or in the same
    /// file) credential, if set.
    private static func defaultCredential(_ source: HeraldConfigurationSource) throws -> Authentication? {
        if let keyPath = source["HERALD_APNS_KEY_PATH"] {
            guard let keyID = source["HERALD_APNS_KEY_ID"], let teamID = source["HERALD_APNS_TEAM_ID"] else {
                throw ConfigurationError("HERALD_APNS_KEY_PATH needs HERALD_APNS_KEY_ID and HERALD_APNS_TEAM_ID")
            }
            return try APNSCredentialsFile.tokenCredential(
                keyPath: keyPath,
                keyID: keyID,
                teamID: teamID,
                names: (key: "HERALD_APNS_KEY_PATH", keyID: "HERALD_APNS_KEY_ID", teamID: "HERALD_APNS_TEAM_ID")
            )
        }
        if let certificatePath = source["HERALD_APNS_CERT_PATH"] {
            return try APNSCredentialsFile.certificateCredential(
                path: certificatePath,
                keyPath: source["HERALD_APNS_CERT_KEY_PATH"],
                password: source["HERALD_APNS_CERT_PASSWORD"],
                names: (certificate: "HERALD_APNS_CERT_PATH", key: "HERALD_APNS_CERT_KEY_PATH")
            )
        }
        return nil
    }
}
