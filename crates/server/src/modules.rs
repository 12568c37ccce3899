//! The registry: every module the server runs, in the order their handlers run in each phase.
//! Adding a module is adding its file (or folder) and its line here; the core reads this list
//! and names none of them.

use crate::module::Registry;

pub(crate) static ALL: Registry = &[
    &crate::rewrite::MODULE,
    &crate::realip::MODULE,
    &crate::limit_req::MODULE,
    &crate::limit_conn::MODULE,
    &crate::access::MODULE,
    &crate::auth_basic::MODULE,
    &crate::auth_request::MODULE,
    &crate::auth_jwt::MODULE,
    &crate::headers::MODULE,
    &crate::map::MODULE,
    &crate::referer::MODULE,
    &crate::secure_link::MODULE,
    &crate::split_clients::MODULE,
    &crate::geo::MODULE,
    &crate::mirror::MODULE,
    &crate::stub_status::MODULE,
    &crate::empty_gif::MODULE,
    &crate::gateway::FASTCGI,
    &crate::gateway::UWSGI,
    &crate::gateway::SCGI,
    &crate::proxy::MODULE,
    &crate::grpc::MODULE,
    &crate::health_check::MODULE,
    &crate::sub_filter::MODULE,
    &crate::charset::MODULE,
    &crate::ssi::MODULE,
    &crate::gzip::MODULE,
    &crate::api::MODULE,
    &crate::access_log::MODULE,
    &crate::h2::MODULE,
    &crate::tls_conf::MODULE,
    &crate::index::MODULE,
    &crate::autoindex::MODULE,
    &crate::static_file::MODULE,
];

#[cfg(test)]
mod tests {
    /// Every module here is one of the directive table's, which `-V` reads: the table says
    /// it is built in, and it owns directives.
    #[test]
    fn every_module_is_in_the_directive_table() {
        for m in super::ALL {
            let entry = portcullis_config::MODULES
                .iter()
                .find(|t| t.name == m.name());
            let entry = entry.unwrap_or_else(|| panic!("{} is not in the table", m.name()));
            assert!(entry.present(), "{} is not built in for -V", m.name());
            // A module with directives owns them (the static module has none).
            assert!(
                entry.directives.is_empty() || entry.directives.iter().any(|d| m.owns(d.name)),
                "{}",
                m.name()
            );
        }
    }
}
