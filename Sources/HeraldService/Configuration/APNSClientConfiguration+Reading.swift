import APNSHTTP2
import ConfigReading
import Configuration
import Foundation

// The APNs client's configuration is read here, in HeraldService, rather than beside the client
// in APNSHTTP2: reading it loads the credentials file and checks its certificates
// (``CredentialsFile``, over swift-certificates), which are the service's, while APNSHTTP2
// stays a client that embedders configure with a value and that links no configuration library.

extension APNSClientConfiguration {
    /// The keys the APNs clients' configuration is read from, relative to Herald's reader
    /// (scoped to `herald`: `apns.key_path` is HERALD_APNS_KEY_PATH): the default credential,
    /// the credentials file, the hosts (devices, broadcasts, channel management), the CA and the
    /// connections per host. The certificate's password is read as a secret.
    static let configKeys: [ConfigKey] = [
        Key.keyPath, Key.keyID, Key.teamID, Key.certificatePath, Key.certificatePassword, Key.certificateKeyPath,
        Key.productionURL, Key.sandboxURL, Key.caPath, Key.connections,
        Key.broadcastProductionURL, Key.broadcastSandboxURL, Key.channelsProductionURL, Key.channelsSandboxURL,
    ]

    /// The keys, named once for their reads and their errors.
    private enum Key {
        static let keyPath: ConfigKey = ["apns", "key_path"]
        static let keyID: ConfigKey = ["apns", "key_id"]
        static let teamID: ConfigKey = ["apns", "team_id"]
        static let certificatePath: ConfigKey = ["apns", "cert_path"]
        static let certificatePassword: ConfigKey = ["apns", "cert_password"]
        static let certificateKeyPath: ConfigKey = ["apns", "cert_key_path"]
        static let productionURL: ConfigKey = ["apns", "production_url"]
        static let sandboxURL: ConfigKey = ["apns", "sandbox_url"]
        static let caPath: ConfigKey = ["apns", "ca_path"]
        static let connections: ConfigKey = ["apns", "connections"]
        static let broadcastProductionURL: ConfigKey = ["apns", "broadcast_production_url"]
        static let broadcastSandboxURL: ConfigKey = ["apns", "broadcast_sandbox_url"]
        static let channelsProductionURL: ConfigKey = ["apns", "channels_production_url"]
        static let channelsSandboxURL: ConfigKey = ["apns", "channels_sandbox_url"]
    }

    /// The HERALD_APNS_KEY_* and HERALD_APNS_CERT_* values, read together.
    private struct DefaultCredentialValues {
        var keyPath: String?
        var keyID: String?
        var teamID: String?
        var certificatePath: String?
        var certificatePassword: String?
        var certificateKeyPath: String?

        init(reading config: ConfigReader) {
            keyPath = config.string(forKey: Key.keyPath)
            keyID = config.string(forKey: Key.keyID)
            teamID = config.string(forKey: Key.teamID)
            certificatePath = config.string(forKey: Key.certificatePath)
            certificatePassword = config.string(forKey: Key.certificatePassword, isSecret: true)
            certificateKeyPath = config.string(forKey: Key.certificateKeyPath)
        }
    }

    /// Everything read from those keys.
    struct Settings {
        /// nil when no APNs credential is configured (only `herald migrate` can run then).
        var client: APNSClientConfiguration?
        /// Certificates that expired, expire within 30 days, or were not issued for a bundle ID
        /// they are configured for: reported, not kept on the configuration.
        var certificateProblems: [String] = []
        /// Where broadcasts go; nil: to the device hosts.
        var broadcastEndpoints: (production: Endpoint, sandbox: Endpoint)?
        var channelManagementEndpoints: (production: Endpoint, sandbox: Endpoint)

        /// Reads the settings from Herald's reader (scoped to `herald`), with the APNs entries of
        /// the credentials file at `credentialsFile`.
        init(reading config: ConfigReader, credentialsFile: String?) throws {
            var certificateProblems: [String] = []
            client = try APNSClientConfiguration.client(config, credentialsFile: credentialsFile, certificateProblems: &certificateProblems)
            self.certificateProblems = certificateProblems
            let broadcastProduction = try APNSClientConfiguration.endpoint(config, Key.broadcastProductionURL)
            let broadcastSandbox = try APNSClientConfiguration.endpoint(config, Key.broadcastSandboxURL)
            if broadcastProduction != nil || broadcastSandbox != nil {
                broadcastEndpoints = (
                    broadcastProduction ?? client?.production ?? .production,
                    broadcastSandbox ?? client?.sandbox ?? .sandbox
                )
            }
            channelManagementEndpoints = (
                try APNSClientConfiguration.endpoint(config, Key.channelsProductionURL) ?? .channelManagementProduction,
                try APNSClientConfiguration.endpoint(config, Key.channelsSandboxURL) ?? .channelManagementSandbox
            )
        }
    }

    /// The APNs client's configuration: the HERALD_APNS_KEY_*/CERT_* credential for every topic,
    /// and the credentials of HERALD_CREDENTIALS_FILE for the apps it lists. Without the
    /// former, the file's credentials are all there is (events for any other topic are
    /// rejected). nil when no credential is configured at all; the hosts, the CA and the
    /// connections are read only then.
    private static func client(
        _ config: ConfigReader,
        credentialsFile: String?,
        certificateProblems: inout [String]
    ) throws -> APNSClientConfiguration? {
        let values = DefaultCredentialValues(reading: config)
        var fileCredentials: [String: Authentication] = [:]
        var certificates = CredentialsFile.CertificateReport()
        if let path = credentialsFile {
            (fileCredentials, certificates) = try CredentialsFile.loadReportingCertificates(path: path)
        }
        if let certificatePath = values.certificatePath, values.keyPath == nil {
            certificates.check(
                path: certificatePath,
                password: values.certificatePassword,
                name: "\(Key.certificatePath.environmentName)=\(certificatePath)",
                servedTopics: []
            )
        }
        certificateProblems += certificates.problems
        let defaultAuthentication = try defaultCredential(values)
        guard defaultAuthentication != nil || !fileCredentials.isEmpty else { return nil }
        var configuration = APNSClientConfiguration(authentication: defaultAuthentication)
        configuration.credentialsByTopic = fileCredentials
        do {
            if let url = config.string(forKey: Key.productionURL) {
                configuration.production = try .init(url: url)
            }
            if let url = config.string(forKey: Key.sandboxURL) {
                configuration.sandbox = try .init(url: url)
            }
        } catch {
            throw ConfigurationError("\(error)")
        }
        if let caPath = config.string(forKey: Key.caPath) {
            guard FileManager.default.isReadableFile(atPath: caPath) else {
                throw ConfigurationError("cannot read \(Key.caPath.environmentName)=\(caPath)")
            }
            configuration.additionalTrustRootsPEMPath = caPath
        }
        configuration.connectionsPerEndpoint = try config.int(forKey: Key.connections, default: configuration.connectionsPerEndpoint, in: 1...64)
        return configuration
    }

    /// The endpoint a `https://host[:port]` value of `key` names, if set.
    private static func endpoint(_ config: ConfigReader, _ key: ConfigKey) throws -> Endpoint? {
        guard let url = config.string(forKey: key) else { return nil }
        do {
            return try .init(url: url)
        } catch {
            throw ConfigurationError("\(key.environmentName): \(error)")
        }
    }

    /// The HERALD_APNS_KEY_* (token) or HERALD_APNS_CERT_* (certificate: PKCS#12 with
    /// HERALD_APNS_CERT_PASSWORD, or PEM with its key in HERALD_APNS_CERT_KEY_PATH or in the same
    /// file) credential, if set.
    private static func defaultCredential(_ values: DefaultCredentialValues) throws -> Authentication? {
        if let keyPath = values.keyPath {
            guard let keyID = values.keyID, let teamID = values.teamID else {
                throw ConfigurationError(
                    "\(Key.keyPath.environmentName) needs \(Key.keyID.environmentName) and \(Key.teamID.environmentName)"
                )
            }
            return try CredentialsFile.tokenCredential(
                keyPath: keyPath,
                keyID: keyID,
                teamID: teamID,
                names: (key: Key.keyPath.environmentName, keyID: Key.keyID.environmentName, teamID: Key.teamID.environmentName)
            )
        }
        if let certificatePath = values.certificatePath {
            return try CredentialsFile.certificateCredential(
                path: certificatePath,
                keyPath: values.certificateKeyPath,
                password: values.certificatePassword,
                names: (certificate: Key.certificatePath.environmentName, key: Key.certificateKeyPath.environmentName)
            )
        }
        return nil
    }
}
