import FCMCore
package import FCMHTTP
import Foundation

extension CredentialsFile {
    /// The FCM entries of the credentials file at `path`, each with its service account read
    /// from `service_account_path` (relative to the file); throws ``ConfigurationError`` naming
    /// the entry and the field, never key material. APNs entries are not checked here.
    package static func fcmEntries(path: String) throws -> [FCMCredentials.Entry] {
        let (data, directory) = try read(path)
        return try parseFCM(data, relativeTo: directory, fileName: path)
    }

    static func parseFCM(_ data: Data, relativeTo directory: String, fileName: String) throws -> [FCMCredentials.Entry] {
        var listed = Set<String>()
        var entries: [FCMCredentials.Entry] = []
        for (index, entry) in try decodeEntries(data, fileName: fileName).enumerated() where entry.platform == "fcm" {
            let place = "HERALD_CREDENTIALS_FILE=\(fileName) entry \(index + 1)"
            guard entry.topics == nil, entry.keyPath == nil, entry.certPath == nil, entry.keyID == nil, entry.teamID == nil,
                entry.certPassword == nil, entry.certKeyPath == nil, entry.apps == nil, entry.vapidKeyPath == nil,
                entry.previousVAPIDKeyPaths == nil, entry.subject == nil
            else {
                throw ConfigurationError("\(place): an FCM entry takes packages and service_account_path only")
            }
            guard let packages = entry.packages, !packages.isEmpty else {
                throw ConfigurationError("\(place): \"packages\" must list at least one Android package name")
            }
            guard let accountPath = entry.serviceAccountPath, !accountPath.isEmpty else {
                throw ConfigurationError("\(place): give service_account_path (a Google service-account key file)")
            }
            for package in packages {
                guard (1...255).contains(package.utf8.count), !package.contains("\0") else {
                    throw ConfigurationError("\(place): the package \"\(package)\" must be 1 to 255 bytes")
                }
                guard listed.insert(package).inserted else {
                    throw ConfigurationError("\(place): the package \(package) is listed twice in the file")
                }
            }
            let account: FCMServiceAccount
            do {
                account = try FCMClientConfiguration.serviceAccount(path: resolve(accountPath, in: directory), name: "\(place): service_account_path")
            } catch {
                throw ConfigurationError("\(error)")
            }
            entries.append(FCMCredentials.Entry(packages: packages, serviceAccount: account))
        }
        return entries
    }
}
