//! Row structs of the stores, decoded column by column.
//!
//! [`row_struct!`](crate::row_struct) declares a struct whose fields are named like the columns of a query and
//! implements `sqlx::FromRow` for one database's rows by reading each field with
//! `Row::try_get(field_name)`. That is what `#[derive(sqlx::FromRow)]` generates; writing it
//! as a declarative macro spares every build sqlx's `macros` feature, whose proc macro
//! compiles a second copy of sqlx, its drivers, tokio and their dependencies for the build
//! host (see the build times in `bench/README.md`).

/// `row_struct!(RowType => struct Name { field: Type, ... })`: the struct, and
/// `sqlx::FromRow<'_, RowType>` reading each field from the column of the same name.
///
/// For stores built on sqlx: the expansion names `::sqlx`, so the calling crate depends on
/// sqlx, and this crate does not.
#[macro_export]
#[doc(hidden)]
macro_rules! row_struct {
    (
        $row:ty =>
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($(#[$field_meta:meta])* $field:ident: $ty:ty),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $($(#[$field_meta])* $field: $ty),*
        }

        impl<'r> ::sqlx::FromRow<'r, $row> for $name {
            fn from_row(row: &'r $row) -> ::sqlx::Result<Self> {
                use ::sqlx::Row as _;
                Ok(Self {
                    $($field: row.try_get(stringify!($field))?),*
                })
            }
        }
    };
}
