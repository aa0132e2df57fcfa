mod docs;
mod engine;
mod gate;
mod image;
mod init;
mod launch;
mod task;
mod validator;
